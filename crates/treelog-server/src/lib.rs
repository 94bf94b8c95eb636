//! `treelog serve`: the network server (tokio) and its HTTP port (axum).
//!
//! The HTTP port comes up first (`/healthz` answers as soon as the process
//! runs); the store is opened (replaying the log) on a blocking thread; only
//! then does `/readyz` turn ready and the RPC port accept connections. On
//! SIGINT/SIGTERM the server stops accepting, tells every connection to stop
//! reading new requests, lets in-flight requests finish (bounded by a grace
//! period), ends subscriptions, and closes the store.
//!
//! Every resource a client can make the server hold is bounded: connections
//! (and, among them, those that have not completed their handshake), the
//! requests in flight and the subscriptions of a connection, the bytes of
//! replies queued for it (beyond which the server stops reading its
//! requests), the frame a client may send, and the HTTP port's connections
//! and the time they take to send their headers.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};

use treelog::{error, metrics, stream};
use treelog_proto::protocol;

mod backups;
mod config;
mod logging;
pub use config::{
    request_runtime, BoxFuture, ClusterService, ClusterSlot, ServerConfig, WorkerPolicy,
    DEFAULT_MAX_CONN_BUFFER_BYTES, FD_RESERVE, MAX_MAX_FRAME, MIN_CONN_BUFFER_BYTES, MIN_MAX_FRAME,
};
pub use logging::{init_logging, LogFormat};

use crate::config::MIN_FITTED_CONNECTIONS;
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{Metrics, READ_OPS};
use crate::protocol::{ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use treelog::ReadAt;
use treelog::Treelog;

struct State {
    cfg: ServerConfig,
    store: OnceLock<Arc<Treelog>>,
    ready: AtomicBool,
    /// The store's metrics, once it is open.
    metrics: OnceLock<Arc<Metrics>>,
    conn_slots: Arc<Semaphore>,
    /// Connections that hold a slot but have not completed the handshake.
    handshakes: Mutex<Handshakes>,
    /// Delays the token checks of addresses that keep failing them.
    auth: Mutex<AuthThrottle>,
    /// Rate limits of the refused-connection warnings.
    refusals: logging::Refusals,
    shutdown: watch::Receiver<bool>,
    /// Stops both ports (the handle's shutdown, or the writer's failure).
    stop: Arc<watch::Sender<bool>>,
    /// Subscriptions are delivered here, at a lower priority than request
    /// handling and the writer (see [`crate::stream::DeliveryRuntime`]).
    delivery: crate::stream::DeliveryRuntime,
    /// Backups being fetched over the RPC port.
    backups: Arc<backups::Backups>,
}

impl State {
    fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.get()
    }
}

/// Addresses the server bound (useful with port 0).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub rpc: SocketAddr,
    pub http: SocketAddr,
}

/// The server's two listening sockets, bound before it starts (see
/// [`start_on`]): a process that runs servers one after another on the
/// same data (a replica's re-bootstrap) keeps its ports, and the
/// connections that arrive between two of them wait in the backlog.
#[derive(Debug)]
pub struct Listeners {
    pub rpc: std::net::TcpListener,
    pub http: std::net::TcpListener,
}

impl Listeners {
    pub fn bind(rpc: SocketAddr, http: SocketAddr) -> Result<Listeners> {
        let bind = |a: SocketAddr| {
            std::net::TcpListener::bind(a).map_err(|e| {
                Error::Io(std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on {a}: {e}"),
                ))
            })
        };
        Ok(Listeners {
            http: bind(http)?,
            rpc: bind(rpc)?,
        })
    }

    /// Another handle on the same sockets.
    pub fn try_clone(&self) -> Result<Listeners> {
        Ok(Listeners {
            rpc: self.rpc.try_clone()?,
            http: self.http.try_clone()?,
        })
    }

    pub fn bound(&self) -> Result<Bound> {
        Ok(Bound {
            rpc: self.rpc.local_addr()?,
            http: self.http.local_addr()?,
        })
    }
}

/// A running server, for tests and embedding: `shutdown()` stops it.
pub struct ServerHandle {
    pub bound: Bound,
    /// The limits in force (`max_connections` may have been lowered to
    /// fit the open-file limit).
    pub config: ServerConfig,
    metrics: Option<Arc<Metrics>>,
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

    /// The server's metrics (`None` when the store runs without them).
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
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
    if cfg.token.is_none() && !cfg.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %cfg.listen,
            "the RPC port is on a non-loopback address and no token is required: anyone who \
             can reach it can read and change the namespace"
        );
    }
    fit_fd_limit(&mut cfg)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    listeners.rpc.set_nonblocking(true)?;
    listeners.http.set_nonblocking(true)?;
    let http_listener = TcpListener::from_std(listeners.http)?;
    let rpc_listener = TcpListener::from_std(listeners.rpc)?;
    let bound = Bound {
        rpc: rpc_listener.local_addr()?,
        http: http_listener.local_addr()?,
    };
    let delivery = crate::stream::DeliveryRuntime::new(cfg.stream_priority)?;
    let state = Arc::new(State {
        conn_slots: Arc::new(Semaphore::new(cfg.max_connections)),
        cfg,
        store: OnceLock::new(),
        ready: AtomicBool::new(false),
        metrics: OnceLock::new(),
        handshakes: Default::default(),
        auth: Default::default(),
        refusals: Default::default(),
        shutdown: stop_rx.clone(),
        stop: stop_tx.clone(),
        delivery,
        backups: Default::default(),
    });
    tokio::spawn(state.backups.clone().run_expiry(stop_rx.clone()));
    let http = tokio::spawn(http_server(http_listener, state.clone()));
    // Open the store (replay) off the runtime threads.
    let (data, opts) = (state.cfg.data.clone(), state.cfg.store.clone());
    let t = tokio::task::spawn_blocking(move || Treelog::open(data, opts))
        .await
        .map_err(|e| Error::Protocol(format!("open task: {e}")))??;
    let t = Arc::new(t);
    let weak_store = Arc::downgrade(&t);
    if let Some(m) = t.metrics() {
        m.connection_limit.set(state.cfg.max_connections as i64);
        let _ = state.metrics.set(m.clone());
    }
    let format_version = t.store().format_version().unwrap_or(0);
    let _ = state.store.set(t);
    state.ready.store(true, Ordering::Release);
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
        "serving"
    );
    let config = state.cfg.clone();
    let metrics = state.metrics().cloned();
    let done = tokio::spawn(accept_loop(rpc_listener, state, http));
    Ok(ServerHandle {
        bound,
        config,
        metrics,
        stop: stop_tx,
        done,
        store: weak_store,
    })
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, then makes the
/// connection limits fit in it with [`FD_RESERVE`] to spare: lowers
/// `max_connections` (loudly) or, when too few would remain, refuses.
fn fit_fd_limit(cfg: &mut ServerConfig) -> Result<()> {
    let Some(limit) = raise_fd_limit() else {
        return Ok(());
    };
    let fixed = cfg.max_http_connections + FD_RESERVE;
    if cfg.max_connections + fixed <= limit {
        return Ok(());
    }
    let fits = limit.saturating_sub(fixed);
    if fits < MIN_FITTED_CONNECTIONS {
        return Err(Error::InvalidArgument(format!(
            "the open-file limit (RLIMIT_NOFILE) is {limit}: too low for {} connections, {} HTTP \
             connections and {FD_RESERVE} files for RocksDB and the process; raise it (ulimit -n, \
             LimitNOFILE=) to at least {}",
            cfg.max_connections,
            cfg.max_http_connections,
            MIN_FITTED_CONNECTIONS + fixed
        )));
    }
    tracing::warn!(
        nofile = limit,
        from = cfg.max_connections,
        to = fits,
        http_connections = cfg.max_http_connections,
        reserved = FD_RESERVE,
        "the open-file limit (RLIMIT_NOFILE) is {limit}: lowering --max-connections from {} \
         to {fits} (reserving {} for HTTP and {FD_RESERVE} for RocksDB and the process); raise \
         the limit (ulimit -n, LimitNOFILE=) to serve more",
        cfg.max_connections,
        cfg.max_http_connections
    );
    cfg.max_connections = fits;
    Ok(())
}

/// The soft open-file limit after raising it as far as the hard limit
/// allows; `None` when it cannot be read (or is unlimited).
fn raise_fd_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit write and read the struct given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return None;
        }
        if r.rlim_cur < r.rlim_max {
            // An unlimited hard limit still cannot exceed the kernel's
            // per-process maximum (fs.nr_open, 1 Mi by default).
            let want = if r.rlim_max == libc::RLIM_INFINITY {
                1 << 20
            } else {
                r.rlim_max
            };
            let raised = libc::rlimit {
                rlim_cur: want.max(r.rlim_cur),
                rlim_max: r.rlim_max,
            };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                r.rlim_cur = raised.rlim_cur;
            }
        }
        if r.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        usize::try_from(r.rlim_cur).ok()
    }
    #[cfg(not(unix))]
    None
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

/// Installs the SIGINT/SIGTERM handlers now; the future ends at the first
/// signal, with its name.
pub fn signal_handlers() -> impl std::future::Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        async move {
            match handlers {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                    "SIGINT"
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}

/// Pause after a failed `accept` (out of file descriptors, typically: the
/// pending connection stays queued, so retrying at once would spin).
/// Doubles per consecutive failure, from 10 ms up to 1 s.
struct AcceptBackoff {
    next: Duration,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    fn new() -> AcceptBackoff {
        AcceptBackoff { next: Self::FIRST }
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    /// Counts and logs the error; returns how long to wait.
    fn failed(&mut self, port: &str, e: &std::io::Error, state: &State) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        if let Some(m) = state.metrics() {
            m.accept_errors.with_label_values(&[port]).inc();
        }
        // One event per failure: at most ~1 a second once the backoff is up.
        tracing::warn!(
            port,
            error = %e,
            retry_ms = wait.as_millis() as u64,
            "accept failed; retrying"
        );
        wait
    }
}

/// Serves the RPC port until the shutdown signal, then drains it, waits for
/// the HTTP port (`http`) to end, and closes the store.
async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    http: tokio::task::JoinHandle<()>,
) -> Result<()> {
    let mut shutdown = state.shutdown.clone();
    let mut conns = tokio::task::JoinSet::new();
    let mut backoff = AcceptBackoff::new();
    // How often the loop looks at the writer (a stopped writer is rare;
    // ending within a second of it is soon enough).
    let mut writer_check = tokio::time::interval(Duration::from_secs(1));
    let mut writer_failure = None;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = writer_check.tick(), if state.cfg.exit_on_writer_failure => {
                if let Some(why) = state.store.get().and_then(|t| t.writer_failure()) {
                    tracing::error!(
                        reason = %why,
                        "the writer stopped: draining and ending the server, to be restarted \
                         (the restart replays the log)"
                    );
                    writer_failure = Some(why);
                    // The HTTP port stops on the same signal.
                    let _ = state.stop.send(true);
                    break;
                }
            }
            accepted = listener.accept() => {
                let (sock, peer) = match accepted {
                    Ok(x) => {
                        backoff.reset();
                        x
                    }
                    Err(e) => {
                        let wait = backoff.failed("rpc", &e, &state);
                        tokio::select! {
                            _ = shutdown.changed() => break,
                            _ = tokio::time::sleep(wait) => continue,
                        }
                    }
                };
                if let Some(m) = state.metrics() {
                    m.connections_total.inc();
                }
                match admit(&state) {
                    Some(admission) => {
                        let st = state.clone();
                        conns.spawn(async move {
                            if let Some(m) = st.metrics() { m.connections.inc(); }
                            let _ = connection(sock, peer, admission, st.clone()).await;
                            if let Some(m) = st.metrics() { m.connections.dec(); }
                        });
                    }
                    None => {
                        if let Some(m) = state.metrics() {
                            m.connections_rejected.inc();
                        }
                        if let Some(suppressed) = state.refusals.busy.check() {
                            tracing::warn!(
                                %peer,
                                port = "rpc",
                                limit = state.cfg.max_connections,
                                suppressed,
                                "refused a connection: too many connections"
                            );
                        }
                        conns.spawn(async move {
                            let _ = refuse(sock, ErrorKind::Busy, "too many connections").await;
                        });
                    }
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    // Let connections finish their in-flight requests, then close the store.
    let grace = state.cfg.shutdown_grace;
    tracing::info!(
        connections = conns.len(),
        grace_ms = grace.as_millis() as u64,
        "stopped accepting connections; draining"
    );
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    tracing::info!(aborted = conns.len(), "connections drained");
    conns.abort_all();
    // Every task that holds the store ends before it is closed: the aborted
    // connections, and the HTTP port (which stops on the same signal).
    // Otherwise the close below could find the store still shared, and the
    // database would stay open (and locked) after `shutdown` returned.
    while conns.join_next().await.is_some() {}
    let _ = http.await;
    if let Some(t) = state.store.get() {
        state.ready.store(false, Ordering::Release);
        let t = t.clone();
        drop(state);
        // Close when this is the last reference (connections are gone).
        tokio::task::spawn_blocking(move || match Arc::try_unwrap(t) {
            Ok(t) => t.close(),
            Err(t) => {
                tracing::warn!(
                    holders = Arc::strong_count(&t) - 1,
                    "the store is still referenced at shutdown: flushed, closed when released"
                );
                t.store().flush()
            }
        })
        .await
        .map_err(|e| Error::Protocol(format!("close task: {e}")))??;
        tracing::info!("store closed");
    }
    match writer_failure {
        Some(why) => Err(Error::WriterStopped(why)),
        None => Ok(()),
    }
}

async fn refuse(mut sock: TcpStream, kind: ErrorKind, msg: &str) -> Result<()> {
    let frame = protocol::encode(&ServerMsg::Fatal {
        kind,
        message: msg.to_owned(),
    })?;
    let _ = tokio::time::timeout(Duration::from_secs(1), sock.write_all(&frame)).await;
    let _ = sock.shutdown().await;
    Ok(())
}

// ---------------------------------------------------------------------------
// Admission: connection slots, the handshake share, failed authentications
// ---------------------------------------------------------------------------

/// A connection waiting for its handshake: its slot, and how to close it.
struct Waiting {
    permit: OwnedSemaphorePermit,
    evict: oneshot::Sender<()>,
}

/// Connections that hold a slot but have not completed their handshake,
/// oldest first (ids grow).
#[derive(Default)]
struct Handshakes {
    next_id: u64,
    waiting: BTreeMap<u64, Waiting>,
}

impl Handshakes {
    /// Closes the oldest connection waiting for its handshake; returns its
    /// slot.
    fn evict_oldest(&mut self, metrics: Option<&Arc<Metrics>>) -> Option<OwnedSemaphorePermit> {
        let (_, w) = self.waiting.pop_first()?;
        let _ = w.evict.send(());
        if let Some(m) = metrics {
            m.handshake_evictions.inc();
        }
        Some(w.permit)
    }
}

/// A connection's slot. Until the handshake completes it sits in
/// [`State::handshakes`], where a newer connection may reclaim it.
struct Admission {
    state: Arc<State>,
    id: u64,
    evicted: oneshot::Receiver<()>,
    /// Held once the handshake completed.
    permit: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// Takes the slot out of the handshake share. `None`: it was reclaimed
    /// for a newer connection.
    fn complete(&mut self) -> bool {
        let mut hs = lock(&self.state.handshakes);
        self.permit = hs.waiting.remove(&self.id).map(|w| w.permit);
        set_handshaking(&self.state, &hs);
        self.permit.is_some()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.permit.is_none() {
            let mut hs = lock(&self.state.handshakes);
            hs.waiting.remove(&self.id);
            set_handshaking(&self.state, &hs);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn set_handshaking(state: &State, hs: &Handshakes) {
    if let Some(m) = state.metrics() {
        m.handshaking.set(hs.waiting.len() as i64);
    }
}

/// Gives a new connection a slot: a free one, else the slot of the oldest
/// connection still waiting for its handshake. At most
/// [`ServerConfig::handshaking_limit`] connections wait at once (the oldest
/// is closed to admit a newer one), so the rest of the slots stay with
/// clients that completed the handshake. `None`: every slot belongs to a
/// handshaken client.
fn admit(state: &Arc<State>) -> Option<Admission> {
    let metrics = state.metrics();
    let mut hs = lock(&state.handshakes);
    let permit = match state.conn_slots.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => hs.evict_oldest(metrics)?,
    };
    if hs.waiting.len() >= state.cfg.handshaking_limit() {
        drop(hs.evict_oldest(metrics));
    }
    let id = hs.next_id;
    hs.next_id += 1;
    let (evict, evicted) = oneshot::channel();
    hs.waiting.insert(id, Waiting { permit, evict });
    set_handshaking(state, &hs);
    Some(Admission {
        state: state.clone(),
        id,
        evicted,
        permit: None,
    })
}

/// Failed token checks per client address (IPv6 by /64): after a failure,
/// the address's next check waits 50 ms, doubling per further failure up
/// to 5 s, and checks from one address are spaced by that much, so
/// guessing from one address is slow however many connections it opens.
/// An address is forgotten 10 minutes after its last failure, or at once
/// when it presents the right token.
#[derive(Default)]
struct AuthThrottle {
    peers: HashMap<IpAddr, Failures>,
}

struct Failures {
    count: u32,
    /// When the next token check from this address may run.
    next_check: Instant,
    last: Instant,
}

impl AuthThrottle {
    const FIRST_DELAY: Duration = Duration::from_millis(50);
    const MAX_DELAY: Duration = Duration::from_secs(5);
    /// A check further off than this is refused (Busy) instead of waited for.
    const MAX_WAIT: Duration = Duration::from_secs(10);
    const FORGET: Duration = Duration::from_secs(600);
    /// Addresses tracked at most.
    const MAX_PEERS: usize = 10_000;

    fn key(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let mut o = v6.octets();
                    o[8..].fill(0);
                    IpAddr::V6(o.into())
                }
            },
            v4 => v4,
        }
    }

    fn delay(count: u32) -> Duration {
        Self::FIRST_DELAY
            .saturating_mul(1 << count.saturating_sub(1).min(16))
            .min(Self::MAX_DELAY)
    }

    /// How long a token check from `ip` must wait (zero for an address
    /// without recent failures); `None`: too long, refuse.
    fn reserve(&mut self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let Some(f) = self.peers.get_mut(&Self::key(ip)) else {
            return Some(Duration::ZERO);
        };
        if now.duration_since(f.last) > Self::FORGET {
            self.peers.remove(&Self::key(ip));
            return Some(Duration::ZERO);
        }
        let at = f.next_check.max(now);
        let wait = at - now;
        if wait > Self::MAX_WAIT {
            return None;
        }
        f.next_check = at + Self::delay(f.count);
        Some(wait)
    }

    fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.peers.len() >= Self::MAX_PEERS {
            self.peers
                .retain(|_, f| now.duration_since(f.last) <= Self::FORGET);
            if self.peers.len() >= Self::MAX_PEERS {
                // Still full: forget the address that failed longest ago.
                if let Some(k) = self
                    .peers
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(k, _)| *k)
                {
                    self.peers.remove(&k);
                }
            }
        }
        let f = self.peers.entry(Self::key(ip)).or_insert(Failures {
            count: 0,
            next_check: now,
            last: now,
        });
        f.count = f.count.saturating_add(1);
        f.last = now;
        f.next_check = f.next_check.max(now + Self::delay(f.count));
    }

    fn succeeded(&mut self, ip: IpAddr) {
        self.peers.remove(&Self::key(ip));
    }
}

/// Checks `given` against the configured token, first waiting as long as
/// [`AuthThrottle`] says for `peer`. `Err` when the wait would be too long.
async fn check_token(state: &State, peer: IpAddr, given: &Option<String>) -> Result<bool> {
    if state.cfg.token.is_none() {
        return Ok(true);
    }
    let wait = lock(&state.auth).reserve(peer, Instant::now());
    match wait {
        None => {
            return Err(Error::Busy(
                "too many failed authentications from this address; retry later".into(),
            ))
        }
        Some(d) if !d.is_zero() => tokio::time::sleep(d).await,
        Some(_) => {}
    }
    let ok = token_ok(&state.cfg.token, given);
    let mut auth = lock(&state.auth);
    if ok {
        auth.succeeded(peer);
    } else {
        auth.failed(peer, Instant::now());
        if let Some(m) = state.metrics() {
            m.auth_failures.inc();
        }
    }
    Ok(ok)
}

fn token_ok(expected: &Option<String>, given: &Option<String>) -> bool {
    match expected {
        None => true,
        Some(want) => {
            let got = given.as_deref().unwrap_or("");
            // Constant time in the token's content (length leaks, as usual).
            bool::from(want.as_bytes().ct_eq(got.as_bytes()))
        }
    }
}

// ---------------------------------------------------------------------------
// A connection's outgoing frames, bounded in bytes
// ---------------------------------------------------------------------------

/// Bytes queued for one connection: counted when a frame is encoded,
/// uncounted when the frame is dropped (written to the socket, or thrown
/// away with the queue).
struct OutCount {
    queued: AtomicUsize,
    bound: usize,
    /// Woken when `queued` falls below `bound`, or the writer stops.
    drained: Notify,
    closed: AtomicBool,
    metrics: Option<Arc<Metrics>>,
}

impl OutCount {
    fn full(&self) -> bool {
        self.queued.load(Ordering::Acquire) >= self.bound && !self.closed.load(Ordering::Acquire)
    }

    fn add(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::AcqRel);
        if let Some(m) = &self.metrics {
            m.queued_bytes.add(n as i64);
        }
    }

    fn sub(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::AcqRel);
        if let Some(m) = &self.metrics {
            m.queued_bytes.sub(n as i64);
        }
        if before >= self.bound && before - n < self.bound {
            self.drained.notify_waiters();
        }
    }

    /// The writer stopped: nothing will drain any more; release the
    /// waiters (their frames are then dropped, and uncounted, at once).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Waits until the queue is below its bound (or the writer stopped).
    async fn room(&self) {
        while self.full() {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the check: a drain in between still wakes it.
            drained.as_mut().enable();
            if !self.full() {
                return;
            }
            drained.await;
        }
    }
}

/// An encoded frame counted in its connection's queue until dropped.
struct Frame {
    bytes: Vec<u8>,
    count: Arc<OutCount>,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.count.sub(self.bytes.len());
    }
}

#[derive(Clone)]
struct Out {
    tx: mpsc::Sender<Frame>,
    count: Arc<OutCount>,
}

impl Out {
    /// Queues an encoded frame, whatever the queue holds: callers wait for
    /// [`Out::room`] before they make one. False once the connection is
    /// gone.
    async fn push(&self, bytes: Vec<u8>) -> bool {
        self.count.add(bytes.len());
        let frame = Frame {
            bytes,
            count: self.count.clone(),
        };
        self.tx.send(frame).await.is_ok()
    }

    async fn room(&self) {
        self.count.room().await
    }
}

type ReadHalf = tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>;

/// Sends the response `body` to request `id`; false once the connection is gone.
async fn respond(out: &Out, id: u64, body: ResponseBody) -> bool {
    send(out, &ServerMsg::Response { id, body }).await
}

async fn send(out: &Out, msg: &ServerMsg) -> bool {
    match protocol::encode(msg) {
        Ok(f) => out.push(f).await,
        Err(_) => false,
    }
}

async fn connection(
    sock: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    state: Arc<State>,
) -> Result<()> {
    let _ = sock.set_nodelay(true);
    let (rd, wr) = sock.into_split();
    // Buffered: a pipelining client's frames arrive many per segment, and
    // reading each one's length and body straight from the socket would
    // cost two system calls per request.
    let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
    let (out_tx, out_rx) = mpsc::channel::<Frame>(1024);
    let count = Arc::new(OutCount {
        queued: AtomicUsize::new(0),
        bound: state.cfg.max_conn_buffer_bytes,
        drained: Notify::new(),
        closed: AtomicBool::new(false),
        metrics: state.metrics().cloned(),
    });
    // One task owns the socket's write half and batches frames.
    let writer = {
        let count = count.clone();
        tokio::spawn(async move {
            protocol::write_loop(out_rx, wr).await;
            count.close();
        })
    };
    let out = Out { tx: out_tx, count };
    let result = serve_connection(&mut rd, &out, peer, admission, &state).await;
    if let Err(e) = &result {
        if let Some(m) = state.metrics() {
            if matches!(
                e.kind(),
                ErrorKind::Corruption | ErrorKind::InvalidArgument | ErrorKind::Protocol
            ) {
                m.bad_frames.inc();
            }
        }
        let kind = match e.kind() {
            ErrorKind::Corruption => ErrorKind::Protocol,
            k => k,
        };
        let _ = send(
            &out,
            &ServerMsg::Fatal {
                kind,
                message: e.to_string(),
            },
        )
        .await;
    }
    drop(out);
    let _ = writer.await;
    result
}

async fn read_msg(
    rd: &mut ReadHalf,
    max: usize,
    wait: Option<Duration>,
) -> Result<Option<ClientMsg>> {
    // A frame already whole in the buffer is read without arming a timer
    // (a pipelining client's frames mostly are).
    let frame = match wait.filter(|_| !frame_buffered(rd)) {
        Some(d) => match tokio::time::timeout(d, protocol::read_frame(rd, max)).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Protocol(format!(
                    "no complete frame within {} s",
                    d.as_secs()
                )))
            }
        },
        None => protocol::read_frame(rd, max).await?,
    };
    match frame {
        Some(f) => Ok(Some(protocol::decode::<ClientMsg>(&f)?)),
        None => Ok(None),
    }
}

struct ConnCtx {
    t: Arc<Treelog>,
    out: Out,
    in_flight: Arc<Semaphore>,
    subs: Arc<Mutex<HashMap<u64, watch::Sender<bool>>>>,
    metrics: Option<Arc<Metrics>>,
    shutdown: watch::Receiver<bool>,
    max_subscriptions: usize,
    delivery: tokio::runtime::Handle,
    backups: Arc<backups::Backups>,
    cluster: Option<ClusterSlot>,
}

impl ConnCtx {
    /// The node's cluster service; `InvalidArgument` on a single node,
    /// `Busy` until Raft runs.
    fn cluster(&self) -> Result<&Arc<dyn ClusterService>> {
        match &self.cluster {
            None => Err(Error::InvalidArgument(
                "this server is not a node of a Raft cluster (serve --node-id)".into(),
            )),
            Some(slot) => slot
                .get()
                .ok_or_else(|| Error::Busy("Raft is not running on this node yet".into())),
        }
    }
}

/// Reads the Hello and checks it; `Ok(None)` when the client went away.
async fn handshake(
    rd: &mut ReadHalf,
    out: &Out,
    peer: SocketAddr,
    state: &Arc<State>,
) -> Result<Option<()>> {
    let cfg = &state.cfg;
    let hello: Hello =
        match read_msg(rd, cfg.max_frame.min(64 << 10), Some(cfg.handshake_timeout)).await? {
            Some(ClientMsg::Hello(h)) => h,
            Some(_) => return Err(Error::Protocol("the first frame must be Hello".into())),
            None => return Ok(None),
        };
    if hello.magic != protocol::MAGIC {
        return Err(Error::Protocol("bad magic in Hello".into()));
    }
    if hello.version != protocol::PROTOCOL_VERSION {
        return Err(Error::Protocol(format!(
            "protocol version {} is not supported (this server speaks {})",
            hello.version,
            protocol::PROTOCOL_VERSION
        )));
    }
    if !check_token(state, peer.ip(), &hello.token).await? {
        if let Some(suppressed) = state.refusals.unauthorized.check() {
            tracing::warn!(
                %peer,
                port = "rpc",
                suppressed,
                "refused a connection: wrong or missing token"
            );
        }
        let _ = send(
            out,
            &ServerMsg::Fatal {
                kind: ErrorKind::Unauthorized,
                message: "wrong or missing token".into(),
            },
        )
        .await;
        return Ok(None);
    }
    Ok(Some(()))
}

async fn serve_connection(
    rd: &mut ReadHalf,
    out: &Out,
    peer: SocketAddr,
    mut admission: Admission,
    state: &Arc<State>,
) -> Result<()> {
    let cfg = &state.cfg;
    let mut shutdown = state.shutdown.clone();
    // Handshake, unless a newer connection reclaims this one's slot first.
    let shook = tokio::select! {
        r = handshake(rd, out, peer, state) => r,
        _ = &mut admission.evicted => Err(Error::Busy(
            "too many connections waiting for their handshake; this one was the oldest".into(),
        )),
        _ = shutdown.changed() => return Ok(()),
    };
    let shook = shook.and_then(|shook| {
        if shook.is_some() && !admission.complete() {
            return Err(Error::Busy(
                "too many connections waiting for their handshake; this one was the oldest".into(),
            ));
        }
        Ok(shook)
    });
    let shook = match shook {
        Ok(s) => s,
        Err(e) => {
            if let Some(suppressed) = state.refusals.handshake.check() {
                tracing::warn!(
                    %peer,
                    error = %e,
                    suppressed,
                    "closed a connection during its handshake"
                );
            }
            return Err(e);
        }
    };
    if shook.is_none() {
        return Ok(());
    }
    let t = state
        .store
        .get()
        .cloned()
        .ok_or_else(|| Error::Protocol("store not open".into()))?;
    if !send(
        out,
        &ServerMsg::Welcome {
            version: protocol::PROTOCOL_VERSION,
            server: format!("treelog {}", env!("CARGO_PKG_VERSION")),
            committed_seq: t.committed_seq(),
            // `validate` keeps it within u32.
            max_frame: u32::try_from(cfg.max_frame).unwrap_or(u32::MAX),
        },
    )
    .await
    {
        return Ok(());
    }
    let ctx = Arc::new(ConnCtx {
        t,
        out: out.clone(),
        in_flight: Arc::new(Semaphore::new(cfg.max_in_flight)),
        subs: Default::default(),
        metrics: state.metrics().cloned(),
        shutdown: state.shutdown.clone(),
        max_subscriptions: cfg.max_subscriptions,
        delivery: state.delivery.handle().clone(),
        backups: state.backups.clone(),
        cluster: cfg.cluster.clone(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    // A message read while gathering a batch of reads, not part of it.
    let mut carried: Option<Result<Option<ClientMsg>>> = None;
    let result = loop {
        // Back-pressure in bytes: while the replies queued for this client
        // reach the bound, read none of its requests (TCP then holds the
        // client back).
        if out.count.full() {
            if let Some(m) = &ctx.metrics {
                m.backpressure.inc();
            }
            tokio::select! {
                _ = shutdown.changed() => break Ok(()),
                _ = out.room() => {}
            }
        }
        // With live subscriptions a quiet client is not idle.
        let wait = if ctx.subs.lock().map(|s| s.is_empty()).unwrap_or(true) {
            Some(cfg.idle_timeout)
        } else {
            None
        };
        let msg = match carried.take() {
            Some(m) => m,
            None => tokio::select! {
                _ = shutdown.changed() => break Ok(()),
                m = read_msg(rd, cfg.max_frame, wait) => m,
            },
        };
        let (id, body) = match msg {
            Ok(Some(ClientMsg::Request { id, body })) => (id, body),
            Ok(Some(ClientMsg::Hello(_))) => break Err(Error::Protocol("Hello sent twice".into())),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // Subscriptions register before the next read, so that the idle
        // timeout never applies to a connection that carries one.
        let mut cancel = None;
        if let RequestBody::Subscribe(_)
        | RequestBody::SubscribeAt { .. }
        | RequestBody::Replicate(_) = &body
        {
            let (tx, rx) = watch::channel(false);
            let admitted = match ctx.subs.lock() {
                Ok(subs) if subs.contains_key(&id) => Err("a request with this id is still active"),
                Ok(mut subs) if subs.len() < ctx.max_subscriptions => {
                    subs.insert(id, tx);
                    Ok(())
                }
                _ => Err("too many subscriptions on this connection"),
            };
            if let Err(why) = admitted {
                let body = protocol::error_body(&Error::Busy(why.into()));
                let _ = respond(&ctx.out, id, body).await;
                continue;
            }
            cancel = Some(rx);
        }
        // Reads that need no wait go out in batches: this one and those
        // behind it already whole in the buffer (a pipelining client's
        // burst), answered by one task. A task per request cost more than
        // the stat itself; answering here instead would keep a
        // connection's reads on one core.
        if read_ready(&ctx, &body) {
            let mut batch = vec![(id, body)];
            while batch.len() < READ_BATCH && frame_buffered(rd) {
                match read_msg(rd, cfg.max_frame, None).await {
                    Ok(Some(ClientMsg::Request { id, body })) if read_ready(&ctx, &body) => {
                        batch.push((id, body))
                    }
                    other => {
                        carried = Some(other);
                        break;
                    }
                }
            }
            let permit = match ctx.in_flight.clone().acquire_owned().await {
                Ok(p) => p,
                Err(_) => break Ok(()),
            };
            let ctx2 = ctx.clone();
            tasks.spawn(async move {
                for (id, body) in batch {
                    let name = request_name(&body);
                    // Made only while the queue has room, as in `handle`.
                    ctx2.out.room().await;
                    let res = read_now(&ctx2, body).unwrap_or_else(not_a_read);
                    count(
                        &ctx2,
                        name,
                        match &res {
                            Ok(_) => "ok",
                            Err(e) => e.kind().as_str(),
                        },
                    );
                    let reply = res.unwrap_or_else(|e| protocol::error_body(&e));
                    if !respond(&ctx2.out, id, reply).await {
                        break;
                    }
                }
                drop(permit);
            });
            while tasks.try_join_next().is_some() {}
            continue;
        }
        // Back-pressure: at most max_in_flight requests per connection; the
        // connection stops reading until one finishes.
        let permit = match ctx.in_flight.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => break Ok(()),
        };
        let is_subscription = cancel.is_some();
        let ctx2 = ctx.clone();
        let task = async move {
            if let Some(m) = &ctx2.metrics {
                m.in_flight.inc();
            }
            handle(&ctx2, id, body, permit, cancel).await;
            if let Some(m) = &ctx2.metrics {
                m.in_flight.dec();
            }
        };
        if is_subscription {
            tasks.spawn_on(task, &ctx.delivery);
        } else {
            tasks.spawn(task);
        }
        while tasks.try_join_next().is_some() {}
    };
    // Stop subscriptions; let other in-flight requests finish and reply.
    if let Ok(subs) = ctx.subs.lock() {
        for s in subs.values() {
            let _ = s.send(true);
        }
    }
    while tasks.join_next().await.is_some() {}
    result
}

fn request_name(b: &RequestBody) -> &'static str {
    match b {
        RequestBody::Mutate(c) => c.name(),
        RequestBody::Stat { .. } => "stat",
        RequestBody::StatId { .. } => "stat_id",
        RequestBody::List { .. } => "list",
        RequestBody::Subscribe(_) | RequestBody::SubscribeAt { .. } => "subscribe",
        RequestBody::Cancel { .. } => "cancel",
        RequestBody::Ack { .. } => "ack",
        RequestBody::ListCursors => "list_cursors",
        RequestBody::DropCursor { .. } => "drop_cursor",
        RequestBody::WaitFor { .. } => "wait_for",
        RequestBody::Ping => "ping",
        RequestBody::Info => "info",
        RequestBody::StatAt { .. } => "stat",
        RequestBody::StatIdAt { .. } => "stat_id",
        RequestBody::ListAt { .. } => "list",
        RequestBody::PinView => "pin_view",
        RequestBody::UnpinView { .. } => "unpin_view",
        RequestBody::BackupBegin { .. } => "backup_begin",
        RequestBody::BackupChunk { .. } => "backup_chunk",
        RequestBody::BackupEnd { .. } => "backup_end",
        RequestBody::Replicate(_) => "replicate",
        RequestBody::Status => "status",
        RequestBody::Raft { .. } => "raft",
        RequestBody::Cluster(_) => "cluster",
        RequestBody::Readlink { .. } => "readlink",
        RequestBody::GetXattrs { .. } => "get_xattrs",
        RequestBody::Count { .. } => "count",
    }
}

/// Largest page a List request may ask for.
const MAX_LIST_LIMIT: u32 = 10_000;

async fn handle(
    ctx: &Arc<ConnCtx>,
    id: u64,
    body: RequestBody,
    permit: tokio::sync::OwnedSemaphorePermit,
    cancel: Option<watch::Receiver<bool>>,
) {
    let name = request_name(&body);
    let t = &ctx.t;
    if cancel.is_none() {
        // Make a reply only while the connection's queue has room: the
        // requests read before it filled do not all add theirs at once.
        // (Reads then build and queue their reply without yielding, so the
        // queue exceeds its bound by at most a reply per worker thread.)
        ctx.out.room().await;
    }
    let res: Result<ResponseBody> = match body {
        RequestBody::Mutate(cmd) => t.submit_async(cmd).await.map(ResponseBody::Seq),
        body @ (RequestBody::Stat { .. }
        | RequestBody::StatId { .. }
        | RequestBody::List { .. }) => read_now(ctx, body).unwrap_or_else(not_a_read),
        RequestBody::Ack { cursor, seq } => t.ack(&cursor, seq).map(|_| ResponseBody::Done),
        RequestBody::ListCursors => Ok(ResponseBody::Cursors(t.cursors())),
        RequestBody::DropCursor { cursor } => t.drop_cursor(&cursor).map(|_| ResponseBody::Done),
        RequestBody::Ping => Ok(ResponseBody::Seq(t.committed_seq())),
        RequestBody::Info => Ok(ResponseBody::Info {
            committed_seq: t.committed_seq(),
            log_start: t.log_start(),
            log_bytes: t.log_bytes(),
        }),
        RequestBody::WaitFor { seq, timeout_ms } => {
            let wm = t.watermark();
            let _ = tokio::time::timeout(
                Duration::from_millis(timeout_ms.min(60_000)),
                wm.wait_for_async(seq),
            )
            .await;
            Ok(ResponseBody::Seq(t.committed_seq()))
        }
        RequestBody::Cancel { target } => {
            let s = ctx.subs.lock().ok().and_then(|mut m| m.remove(&target));
            match s {
                Some(tx) => {
                    let _ = tx.send(true);
                    Ok(ResponseBody::Done)
                }
                None => Err(Error::NotFound(format!("no active request {target}"))),
            }
        }
        body @ (RequestBody::StatAt { at, .. }
        | RequestBody::StatIdAt { at, .. }
        | RequestBody::ListAt { at, .. }) => match caught_up(ctx, at).await {
            Ok(()) => read_now(ctx, body).unwrap_or_else(not_a_read),
            Err(e) => Err(e),
        },
        RequestBody::PinView => t.pin_view().map(ResponseBody::Seq),
        RequestBody::UnpinView { seq } => {
            if t.unpin_view(seq) {
                Ok(ResponseBody::Done)
            } else {
                Err(Error::NotFound(format!("no pinned read view at {seq}")))
            }
        }
        RequestBody::BackupBegin { resume } => ctx.backups.begin(t, resume).await,
        RequestBody::BackupChunk {
            id,
            file,
            offset,
            len,
        } => ctx.backups.chunk(id, file, offset, len).await,
        RequestBody::BackupEnd { id } => ctx.backups.end(id).await,
        RequestBody::Status => Ok(ResponseBody::Status({
            let mut st = t.status();
            if let Ok(c) = ctx.cluster() {
                (st.role, st.leader) = c.role();
            }
            st
        })),
        RequestBody::Raft { rpc, payload } => match ctx.cluster() {
            Ok(c) => c.raft(rpc, payload).await.map(ResponseBody::Raft),
            Err(e) => Err(e),
        },
        RequestBody::Cluster(req) => match ctx.cluster() {
            Ok(c) => c.admin(req).await.map(ResponseBody::Cluster),
            Err(e) => Err(e),
        },
        RequestBody::Readlink { path, at } => match caught_up(ctx, at).await {
            Ok(()) => timed_read(ctx, "readlink", || {
                t.readlink_at(&path, at).map(|r| ResponseBody::Target {
                    target: r.value,
                    seq: r.seq,
                })
            }),
            Err(e) => Err(e),
        },
        RequestBody::GetXattrs { path, name, at } => match caught_up(ctx, at).await {
            Ok(()) => timed_read(ctx, "get_xattrs", || {
                t.xattrs_at(&path, name.as_deref(), at)
                    .map(|r| ResponseBody::Xattrs {
                        xattrs: r.value,
                        seq: r.seq,
                    })
            }),
            Err(e) => Err(e),
        },
        RequestBody::Count { path, at } => match caught_up(ctx, at).await {
            // A walk of up to `max_count_inodes` entries: off the workers.
            Ok(()) => {
                let t2 = t.clone();
                let t0 = std::time::Instant::now();
                let r = tokio::task::spawn_blocking(move || t2.count_at(&path, at))
                    .await
                    .unwrap_or_else(|_| Err(Error::corrupt("count", "the count task panicked")));
                if let Some(m) = &ctx.metrics {
                    m.read_seconds
                        .with_label_values(&["count"])
                        .observe(t0.elapsed().as_secs_f64());
                }
                r.map(|r| ResponseBody::Summary {
                    summary: r.value,
                    seq: r.seq,
                })
            }
            Err(e) => Err(e),
        },
        RequestBody::Replicate(from) => {
            return streamed(ctx, name, permit, cancel, |c| replication(ctx, id, from, c)).await
        }
        RequestBody::SubscribeAt { opts, min_seq } => {
            return streamed(ctx, name, permit, cancel, |c| {
                subscription(ctx, id, opts, min_seq, c)
            })
            .await
        }
        RequestBody::Subscribe(opts) => {
            return streamed(ctx, name, permit, cancel, |c| {
                subscription(ctx, id, opts, 0, c)
            })
            .await
        }
    };
    count(
        ctx,
        name,
        match &res {
            Ok(_) => "ok",
            Err(e) => e.kind().as_str(),
        },
    );
    let body = res.unwrap_or_else(|e| protocol::error_body(&e));
    let _ = respond(&ctx.out, id, body).await;
    drop(permit);
}

/// Runs a streaming request (its replies are its own; it holds no
/// in-flight permit) and counts its outcome.
async fn streamed<F, Fut>(
    ctx: &ConnCtx,
    name: &str,
    permit: tokio::sync::OwnedSemaphorePermit,
    cancel: Option<watch::Receiver<bool>>,
    run: F,
) where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = &'static str>,
{
    drop(permit);
    let outcome = match cancel {
        Some(c) => run(c).await,
        None => "internal",
    };
    count(ctx, name, outcome);
}

/// For a read at `ReadAt::AtLeast(seq)`: waits (without holding a
/// worker) until the store has committed `seq`, at most the store's
/// `min_seq_wait`; then `Lagging` on a replica, `Busy` on a leader.
async fn caught_up(ctx: &ConnCtx, at: ReadAt) -> Result<()> {
    let t = &ctx.t;
    let seq = match at {
        ReadAt::AtLeast(seq) => seq,
        // On a cluster's node: the leader's read index, applied here (the
        // read then sees the newest state, at least that); alone, the
        // newest state is linearizable.
        ReadAt::Linearizable => {
            return match ctx.cluster() {
                Ok(c) => c.read_index().await.map(|_| ()),
                Err(Error::InvalidArgument(_)) => Ok(()),
                Err(e) => Err(e),
            }
        }
        ReadAt::Latest | ReadAt::Exactly(_) => return Ok(()),
    };
    let wm = t.watermark();
    if wm.get() >= seq {
        return Ok(());
    }
    let wait = t.min_seq_wait();
    let _ = tokio::time::timeout(wait, wm.wait_for_async(seq)).await;
    if wm.get() >= seq {
        Ok(())
    } else {
        Err(t.not_caught_up(seq, wait))
    }
}

/// How often a replication stream with nothing to send says it is alive
/// (with the committed sequence and the clock).
const REPLICATION_HEARTBEAT: Duration = Duration::from_millis(500);

/// Largest `max_batch_bytes` a replica may ask for.
const MAX_REPLICATION_BATCH: u32 = 8 << 20;

/// Streams the committed log to a replica from `req.from` (docs/PROTOCOL.md
/// §14) until it is cancelled, the connection goes, or an error: batches
/// of stored records as soon as they are committed, a heartbeat when there
/// is nothing to send. Returns the outcome label for metrics.
async fn replication(
    ctx: &Arc<ConnCtx>,
    id: u64,
    req: protocol::ReplicateFrom,
    mut cancel_rx: watch::Receiver<bool>,
) -> &'static str {
    let unregister = || {
        if let Ok(mut subs) = ctx.subs.lock() {
            subs.remove(&id);
        }
    };
    let t = ctx.t.clone();
    if let Err(e) = t.check_replica(&req) {
        unregister();
        tracing::warn!(error = %e, from = req.from, "refused a replica");
        let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
        return e.kind().as_str();
    }
    if let Some(name) = &req.cursor {
        if let Err(e) = t.hold_for_replica(name, req.from - 1) {
            unregister();
            let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
            return e.kind().as_str();
        }
    }
    let max_bytes = req.max_batch_bytes.clamp(1, MAX_REPLICATION_BATCH) as usize;
    let mut next = req.from;
    let mut shutdown = ctx.shutdown.clone();
    let outcome = loop {
        // Wait for something to send, or the heartbeat.
        let wm = t.watermark();
        if wm.get() < next {
            tokio::select! {
                _ = cancel_rx.changed() => {}
                _ = shutdown.changed() => {}
                _ = tokio::time::timeout(REPLICATION_HEARTBEAT, wm.wait_for_async(next)) => {}
            }
            if *cancel_rx.borrow() || *shutdown.borrow() {
                let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
                break "ok";
            }
        }
        let committed = wm.get();
        let batch = if committed >= next {
            let (t2, from) = (t.clone(), next);
            match tokio::task::spawn_blocking(move || t2.replication_batch(from, max_bytes)).await {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                    break e.kind().as_str();
                }
                Err(_) => break "internal",
            }
        } else {
            Vec::new()
        };
        // A slow replica fills the connection's queue: wait for room
        // before reading further (one batch held, no more).
        if ended_before_room(ctx, id, &mut cancel_rx, &mut shutdown).await {
            break "ok";
        }
        let first = next;
        next += batch.len() as u64;
        let body = ResponseBody::Records {
            first,
            records: batch,
            committed,
            now_ms: treelog::now_ms(),
        };
        if !respond(&ctx.out, id, body).await {
            break "disconnected";
        }
    };
    unregister();
    outcome
}

fn count(ctx: &ConnCtx, name: &str, outcome: &str) {
    if let Some(m) = &ctx.metrics {
        match READ_OPS.iter().position(|o| *o == name) {
            Some(i) if outcome == "ok" => m.requests_ok_by_op[i].inc(),
            _ => m.requests.with_label_values(&[name, outcome]).inc(),
        }
    }
}

fn timed_read<T>(ctx: &ConnCtx, op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    // Counts are kept by the store itself; the server adds latency.
    let t0 = std::time::Instant::now();
    let r = f();
    if let Some(m) = &ctx.metrics {
        let secs = t0.elapsed().as_secs_f64();
        match READ_OPS.iter().position(|o| *o == op) {
            Some(i) => m.read_seconds_by_op[i].observe(secs),
            None => m.read_seconds.with_label_values(&[op]).observe(secs),
        }
    }
    r
}

/// Most reads one task answers in a row (see `serve_connection`). Smaller
/// batches answer a burst's first reads sooner, so the client refills its
/// pipeline while the rest are read; larger ones spawn fewer tasks. One
/// connection × 64 stats in flight (`stat_client`): 64 → 285k/s, 32 →
/// 312k/s, 16 → 329–335k/s, 8 → 296k/s, 1 (a task per read) → 265k/s.
const READ_BATCH: usize = 16;

/// Whether `body` is a read [`read_now`] answers without waiting.
fn read_ready(ctx: &ConnCtx, body: &RequestBody) -> bool {
    let at = match body {
        RequestBody::Stat { .. } | RequestBody::StatId { .. } | RequestBody::List { .. } => {
            return true
        }
        RequestBody::StatAt { at, .. }
        | RequestBody::StatIdAt { at, .. }
        | RequestBody::ListAt { at, .. } => at,
        _ => return false,
    };
    match at {
        ReadAt::Latest | ReadAt::Exactly(_) => true,
        // The watermark only rises: ready now, ready when answered.
        ReadAt::AtLeast(seq) => ctx.t.watermark().get() >= *seq,
        ReadAt::Linearizable => false,
    }
}

/// Whether a whole frame waits in the connection's read buffer.
fn frame_buffered(rd: &ReadHalf) -> bool {
    let b = rd.buffer();
    b.len() >= 4 && b.len() - 4 >= u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// Answers a stat or a listing at once; anything else comes back as it
/// was. The caller has made sure it needs no wait: [`read_ready`], or
/// `caught_up` done.
fn read_now(
    ctx: &ConnCtx,
    body: RequestBody,
) -> std::result::Result<Result<ResponseBody>, RequestBody> {
    let t = &ctx.t;
    let limit = |l: u32| l.clamp(1, MAX_LIST_LIMIT) as usize;
    Ok(match body {
        RequestBody::Stat { path } => {
            timed_read(ctx, "stat", || t.stat(&path).map(ResponseBody::Inode))
        }
        RequestBody::StatId { id } => {
            timed_read(ctx, "stat_id", || t.stat_id(id).map(ResponseBody::Inode))
        }
        RequestBody::List {
            path,
            start_after,
            limit: l,
        } => timed_read(ctx, "list", || {
            t.list(&path, start_after.as_deref(), limit(l))
                .map(ResponseBody::Page)
        }),
        RequestBody::StatAt { path, at } => timed_read(ctx, "stat", || {
            t.stat_at(&path, at).map(|r| ResponseBody::InodeAt {
                inode: r.value,
                seq: r.seq,
            })
        }),
        RequestBody::StatIdAt { id, at } => timed_read(ctx, "stat_id", || {
            t.stat_id_at(id, at).map(|r| ResponseBody::InodeAt {
                inode: r.value,
                seq: r.seq,
            })
        }),
        RequestBody::ListAt {
            path,
            start_after,
            limit: l,
            at,
        } => timed_read(ctx, "list", || {
            t.list_at(&path, start_after.as_deref(), limit(l), at)
                .map(|r| ResponseBody::PageAt {
                    page: r.value,
                    seq: r.seq,
                })
        }),
        other => return Err(other),
    })
}

/// `read_now` given a request it does not answer (a bug, not the client's).
fn not_a_read(body: RequestBody) -> Result<ResponseBody> {
    Err(Error::corrupt(
        "server",
        format!("{} was taken for a read", request_name(&body)),
    ))
}

/// Waits until the connection's queue has room for a stream's next reply;
/// true, with `StreamEnd` sent, when the stream was cancelled or the
/// server began shutting down meanwhile.
async fn ended_before_room(
    ctx: &ConnCtx,
    id: u64,
    cancel_rx: &mut watch::Receiver<bool>,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let ended = tokio::select! {
        _ = cancel_rx.changed() => true,
        _ = shutdown.changed() => true,
        _ = ctx.out.room() => false,
    };
    if ended {
        let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
    }
    ended
}

/// Streams a subscription until it is cancelled, fails, or the server
/// shuts down. Returns the outcome label for metrics.
async fn subscription(
    ctx: &Arc<ConnCtx>,
    id: u64,
    opts: crate::stream::SubscribeOptions,
    min_seq: u64,
    mut cancel_rx: watch::Receiver<bool>,
) -> &'static str {
    let unregister = || {
        if let Ok(mut subs) = ctx.subs.lock() {
            subs.remove(&id);
        }
    };
    // `SubscribeAt`: from a state at least as new as the client's token.
    let subscribed = match caught_up(ctx, ReadAt::AtLeast(min_seq)).await {
        Ok(()) => ctx.t.subscribe(opts),
        Err(e) => Err(e),
    };
    let mut sub = match subscribed {
        Ok(s) => s,
        Err(e) => {
            unregister();
            let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
            return e.kind().as_str();
        }
    };
    if let Some(m) = &ctx.metrics {
        m.subscribers.inc();
    }
    let mut shutdown = ctx.shutdown.clone();
    let outcome = loop {
        let item = tokio::select! {
            _ = cancel_rx.changed() => None,
            _ = shutdown.changed() => None,
            item = sub.next_async() => Some(item),
        };
        let body = match item {
            None => {
                let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
                break "ok";
            }
            Some(Ok(item)) => ResponseBody::Item(item),
            Some(Err(e)) => {
                let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                break e.kind().as_str();
            }
        };
        // A slow client fills the connection's queue: the subscription
        // then waits here, holding one item (shared with the other
        // subscribers until it is encoded) and making no more, instead of
        // buffering without bound. It encodes and queues the item only
        // once there is room.
        if ended_before_room(ctx, id, &mut cancel_rx, &mut shutdown).await {
            break "ok";
        }
        if !respond(&ctx.out, id, body).await {
            break "disconnected";
        }
        if let Some(m) = &ctx.metrics {
            m.delivered.inc();
        }
    };
    unregister();
    if let Some(m) = &ctx.metrics {
        m.subscribers.dec();
    }
    outcome
}

// ---------------------------------------------------------------------------
// HTTP: /metrics, /healthz, /readyz
// ---------------------------------------------------------------------------

/// The client address of an HTTP request (for [`AuthThrottle`]).
#[derive(Clone, Copy)]
struct HttpPeer(IpAddr);

/// Serves the HTTP port: at most `max_http_connections` at once (more are
/// answered 503 and closed), each given `http_header_timeout` to send a
/// request's headers (slow or silent clients are closed, idle keep-alive
/// ones too).
async fn http_server(listener: TcpListener, state: Arc<State>) {
    use axum::routing::get;
    let app = axum::Router::new()
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
        );
    let slots = Arc::new(Semaphore::new(state.cfg.max_http_connections));
    let mut shutdown = state.shutdown.clone();
    let mut conns = tokio::task::JoinSet::new();
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
        let metrics = state.metrics().cloned();
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if let Some(m) = &metrics {
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
            continue;
        };
        let app = app.clone().layer(axum::Extension(HttpPeer(peer.ip())));
        let timeout = state.cfg.http_header_timeout;
        let mut shutdown = state.shutdown.clone();
        conns.spawn(async move {
            if let Some(m) = &metrics {
                m.http_connections.inc();
            }
            let io = hyper_util::rt::TokioIo::new(sock);
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(io, svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.changed() => {
                    // Finish the request in progress, if any, then close.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
                }
            }
            if let Some(m) = &metrics {
                m.http_connections.dec();
            }
            drop(permit);
        });
    }
    // Each connection finishes its request in progress within a second of
    // the signal (above); wait for them, so that nothing of this port holds
    // the store once this returns.
    while conns.join_next().await.is_some() {}
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
        let ok = match check_token(&state, peer.0, &bearer_token(&headers)).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_tokens_space_the_checks_of_their_address() {
        let ms = Duration::from_millis;
        let mut t = AuthThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let now = Instant::now();
        assert_eq!(t.reserve(ip, now), Some(Duration::ZERO));
        t.failed(ip, now);
        // Checks arriving together are spaced by the delay.
        assert_eq!(t.reserve(ip, now), Some(ms(50)));
        assert_eq!(t.reserve(ip, now), Some(ms(100)));
        // Other addresses are not affected; the same IPv6 /64 is.
        assert_eq!(
            t.reserve("10.0.0.2".parse().unwrap(), now),
            Some(Duration::ZERO)
        );
        t.failed("2001:db8::1".parse().unwrap(), now);
        assert_eq!(t.reserve("2001:db8::2".parse().unwrap(), now), Some(ms(50)));
        assert_eq!(
            t.reserve("2001:db8:0:1::2".parse().unwrap(), now),
            Some(Duration::ZERO)
        );
        // The delay doubles per failure, up to 5 s.
        let ip2: IpAddr = "10.0.0.3".parse().unwrap();
        for _ in 0..10 {
            t.failed(ip2, now);
        }
        assert_eq!(t.reserve(ip2, now), Some(AuthThrottle::MAX_DELAY));
        // A check more than 10 s away is refused, not queued.
        assert_eq!(t.reserve(ip2, now), Some(ms(10_000)));
        assert_eq!(t.reserve(ip2, now), None);
        // Forgotten after a quiet while, or at once by the right token.
        assert_eq!(
            t.reserve(ip2, now + AuthThrottle::FORGET + ms(1)),
            Some(Duration::ZERO)
        );
        t.succeeded(ip);
        assert_eq!(t.reserve(ip, now), Some(Duration::ZERO));
    }
}
