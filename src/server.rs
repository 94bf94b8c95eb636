//! `treelog serve`: the network server (tokio) and its HTTP port (axum).
//!
//! The HTTP port comes up first (`/healthz` answers as soon as the process
//! runs); the store is opened (replaying the log) on a blocking thread; only
//! then does `/readyz` turn ready and the RPC port accept connections. On
//! SIGINT/SIGTERM the server stops accepting, tells every connection to stop
//! reading new requests, lets in-flight requests finish (bounded by a grace
//! period), ends subscriptions, and closes the store.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use subtle::ConstantTimeEq;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::error::{Error, ErrorKind, Result};
use crate::metrics::Metrics;
use crate::namespace::{Options, Treelog};
use crate::protocol::{self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use crate::readview::ReadAt;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub http: SocketAddr,
    /// When set, clients must present it in the handshake and HTTP callers
    /// (except `/healthz`, `/readyz`) as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    pub max_frame: usize,
    pub max_connections: usize,
    pub max_in_flight: usize,
    pub max_subscriptions: usize,
    pub handshake_timeout: Duration,
    /// A connection without subscriptions that sends no complete frame for
    /// this long is closed.
    pub idle_timeout: Duration,
    pub shutdown_grace: Duration,
    /// The scheduling priority of the thread that delivers change streams.
    pub stream_priority: crate::stream::DeliveryPriority,
    pub store: Options,
}

impl ServerConfig {
    pub fn new(data: PathBuf) -> ServerConfig {
        ServerConfig {
            data,
            listen: ([127, 0, 0, 1], 7400).into(),
            http: ([127, 0, 0, 1], 7401).into(),
            token: None,
            max_frame: protocol::DEFAULT_MAX_FRAME,
            max_connections: 1024,
            max_in_flight: 256,
            max_subscriptions: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            stream_priority: Default::default(),
            store: Options::default(),
        }
    }
}

/// The scheduling policy of the request workers (the tokio runtime that
/// serves connections and submits their commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerPolicy {
    /// Ordinary threads: a woken worker may preempt the thread running on
    /// its CPU at once. The default.
    #[default]
    Normal,
    /// Linux `SCHED_BATCH`: a worker woken by a reply or a packet does not
    /// preempt the thread running on its CPU, but waits for it to block or
    /// for the scheduler's tick; same share of the CPU as a normal thread.
    /// On a machine whose cores are all busy, the syncer then sends a
    /// round's replies without being preempted by the first worker it
    /// wakes (which held up the rest, and cost a context switch each way):
    /// more creates per second for less CPU (see docs/OPERATIONS.md). The
    /// price: a worker woken onto a core that runs a long CPU-bound thread
    /// (a compaction) may wait up to a tick (1–10 ms) instead of
    /// preempting it.
    Batch,
}

impl std::str::FromStr for WorkerPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "batch" => Ok(WorkerPolicy::Batch),
            "normal" => Ok(WorkerPolicy::Normal),
            _ => Err(Error::InvalidArgument(format!(
                "worker policy {s:?}: expected `batch` or `normal`"
            ))),
        }
    }
}

impl std::fmt::Display for WorkerPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerPolicy::Batch => "batch",
            WorkerPolicy::Normal => "normal",
        })
    }
}

/// The runtime that serves requests: one worker per core, each started at
/// `policy` (best effort: a refusal leaves it a normal thread).
pub fn request_runtime(policy: WorkerPolicy) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || set_worker_policy(policy))
        .build()?)
}

fn set_worker_policy(policy: WorkerPolicy) {
    #[cfg(target_os = "linux")]
    if policy == WorkerPolicy::Batch {
        crate::sched::set_policy(libc::SCHED_BATCH);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = policy;
}

struct State {
    cfg: ServerConfig,
    store: OnceLock<Arc<Treelog>>,
    ready: AtomicBool,
    /// The store's metrics, once it is open.
    metrics: OnceLock<Arc<Metrics>>,
    conn_slots: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    /// Subscriptions are delivered here, at a lower priority than request
    /// handling and the writer (see [`crate::stream::DeliveryRuntime`]).
    delivery: crate::stream::DeliveryRuntime,
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

/// A running server, for tests and embedding: `shutdown()` stops it.
pub struct ServerHandle {
    pub bound: Bound,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<()>>,
}

impl ServerHandle {
    /// Graceful shutdown; waits until the store is closed.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.done
            .await
            .map_err(|e| Error::Protocol(format!("server task: {e}")))?
    }
}

/// Starts the server in the current runtime. Returns once the store is open
/// and both ports are bound.
pub async fn start(cfg: ServerConfig) -> Result<ServerHandle> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let http_listener = TcpListener::bind(cfg.http).await?;
    let rpc_listener = TcpListener::bind(cfg.listen).await?;
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
        shutdown: stop_rx.clone(),
        delivery,
    });
    tokio::spawn(http_server(http_listener, state.clone()));
    // Open the store (replay) off the runtime threads.
    let (data, opts) = (state.cfg.data.clone(), state.cfg.store.clone());
    let t = tokio::task::spawn_blocking(move || Treelog::open(data, opts))
        .await
        .map_err(|e| Error::Protocol(format!("open task: {e}")))??;
    let t = Arc::new(t);
    if let Some(m) = t.metrics() {
        let _ = state.metrics.set(m.clone());
    }
    let _ = state.store.set(t);
    state.ready.store(true, Ordering::Release);
    let done = tokio::spawn(accept_loop(rpc_listener, state));
    Ok(ServerHandle {
        bound,
        stop: stop_tx,
        done,
    })
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(cfg: ServerConfig) -> Result<()> {
    let h = start(cfg).await?;
    eprintln!(
        "treelog: serving on {} (http {}); ready",
        h.bound.rpc, h.bound.http
    );
    wait_for_signal().await;
    eprintln!("treelog: shutting down");
    h.shutdown().await?;
    eprintln!("treelog: store closed");
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) -> Result<()> {
    let mut shutdown = state.shutdown.clone();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let (sock, _) = match accepted {
                    Ok(x) => x,
                    // Out of fds and the like: keep serving the others.
                    Err(_) => continue,
                };
                if let Some(m) = state.metrics() {
                    m.connections_total.inc();
                }
                match state.conn_slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let st = state.clone();
                        conns.spawn(async move {
                            if let Some(m) = st.metrics() { m.connections.inc(); }
                            let _ = connection(sock, st.clone()).await;
                            if let Some(m) = st.metrics() { m.connections.dec(); }
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        if let Some(m) = state.metrics() {
                            m.connections_rejected.inc();
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
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    if let Some(t) = state.store.get() {
        state.ready.store(false, Ordering::Release);
        let t = t.clone();
        drop(state);
        // Close when this is the last reference (connections are gone).
        tokio::task::spawn_blocking(move || match Arc::try_unwrap(t) {
            Ok(t) => t.close(),
            Err(t) => t.store().flush(),
        })
        .await
        .map_err(|e| Error::Protocol(format!("close task: {e}")))??;
    }
    Ok(())
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

type Out = mpsc::Sender<Vec<u8>>;
type ReadHalf = tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>;

/// Sends the response `body` to request `id`; false once the connection is gone.
async fn respond(out: &Out, id: u64, body: ResponseBody) -> bool {
    send(out, &ServerMsg::Response { id, body }).await
}

async fn send(out: &Out, msg: &ServerMsg) -> bool {
    match protocol::encode(msg) {
        Ok(f) => out.send(f).await.is_ok(),
        Err(_) => false,
    }
}

async fn connection(sock: TcpStream, state: Arc<State>) -> Result<()> {
    let _ = sock.set_nodelay(true);
    let (rd, wr) = sock.into_split();
    // Buffered: a pipelining client's frames arrive many per segment, and
    // reading each one's length and body straight from the socket would
    // cost two system calls per request.
    let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(1024);
    // One task owns the socket's write half and batches frames.
    let writer = tokio::spawn(protocol::write_loop(out_rx, wr));
    let result = serve_connection(&mut rd, &out_tx, &state).await;
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
            &out_tx,
            &ServerMsg::Fatal {
                kind,
                message: e.to_string(),
            },
        )
        .await;
    }
    drop(out_tx);
    let _ = writer.await;
    result
}

async fn read_msg(
    rd: &mut ReadHalf,
    max: usize,
    wait: Option<Duration>,
) -> Result<Option<ClientMsg>> {
    let frame = match wait {
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
}

async fn serve_connection(rd: &mut ReadHalf, out: &Out, state: &Arc<State>) -> Result<()> {
    let cfg = &state.cfg;
    // Handshake.
    let hello: Hello =
        match read_msg(rd, cfg.max_frame.min(64 << 10), Some(cfg.handshake_timeout)).await? {
            Some(ClientMsg::Hello(h)) => h,
            Some(_) => return Err(Error::Protocol("the first frame must be Hello".into())),
            None => return Ok(()),
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
    if !token_ok(&cfg.token, &hello.token) {
        if let Some(m) = state.metrics() {
            m.auth_failures.inc();
        }
        let _ = send(
            out,
            &ServerMsg::Fatal {
                kind: ErrorKind::Unauthorized,
                message: "wrong or missing token".into(),
            },
        )
        .await;
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
            max_frame: cfg.max_frame as u32,
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
    });
    let mut shutdown = state.shutdown.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let result = loop {
        // With live subscriptions a quiet client is not idle.
        let wait = if ctx.subs.lock().map(|s| s.is_empty()).unwrap_or(true) {
            Some(cfg.idle_timeout)
        } else {
            None
        };
        let msg = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            m = read_msg(rd, cfg.max_frame, wait) => m,
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
        if let RequestBody::Subscribe(_) = &body {
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
        RequestBody::Subscribe(_) => "subscribe",
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
    let res: Result<ResponseBody> = match body {
        RequestBody::Mutate(cmd) => t.submit_async(cmd).await.map(ResponseBody::Seq),
        RequestBody::Stat { path } => {
            timed_read(ctx, "stat", || t.stat(&path).map(ResponseBody::Inode))
        }
        RequestBody::StatId { id } => {
            timed_read(ctx, "stat_id", || t.stat_id(id).map(ResponseBody::Inode))
        }
        RequestBody::List {
            path,
            start_after,
            limit,
        } => timed_read(ctx, "list", || {
            t.list(
                &path,
                start_after.as_deref(),
                limit.clamp(1, MAX_LIST_LIMIT) as usize,
            )
            .map(ResponseBody::Page)
        }),
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
        RequestBody::StatAt { path, at } => match caught_up(t, at).await {
            Ok(()) => timed_read(ctx, "stat", || {
                t.stat_at(&path, at).map(|r| ResponseBody::InodeAt {
                    inode: r.value,
                    seq: r.seq,
                })
            }),
            Err(e) => Err(e),
        },
        RequestBody::StatIdAt { id, at } => match caught_up(t, at).await {
            Ok(()) => timed_read(ctx, "stat_id", || {
                t.stat_id_at(id, at).map(|r| ResponseBody::InodeAt {
                    inode: r.value,
                    seq: r.seq,
                })
            }),
            Err(e) => Err(e),
        },
        RequestBody::ListAt {
            path,
            start_after,
            limit,
            at,
        } => match caught_up(t, at).await {
            Ok(()) => timed_read(ctx, "list", || {
                t.list_at(
                    &path,
                    start_after.as_deref(),
                    limit.clamp(1, MAX_LIST_LIMIT) as usize,
                    at,
                )
                .map(|r| ResponseBody::PageAt {
                    page: r.value,
                    seq: r.seq,
                })
            }),
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
        RequestBody::Subscribe(opts) => {
            drop(permit);
            let outcome = match cancel {
                Some(c) => subscription(ctx, id, opts, c).await,
                None => "internal",
            };
            count(ctx, name, outcome);
            return;
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

/// For a read at `ReadAt::AtLeast(seq)`: waits (without holding a
/// worker) until the store has committed `seq`, at most `MIN_SEQ_WAIT`;
/// `Busy` if it has not by then.
async fn caught_up(t: &Treelog, at: ReadAt) -> Result<()> {
    let ReadAt::AtLeast(seq) = at else {
        return Ok(());
    };
    let wm = t.watermark();
    if wm.get() >= seq {
        return Ok(());
    }
    let _ = tokio::time::timeout(MIN_SEQ_WAIT, wm.wait_for_async(seq)).await;
    if wm.get() >= seq {
        Ok(())
    } else {
        Err(Error::Busy(format!(
            "not caught up to sequence {seq} within {MIN_SEQ_WAIT:?} (committed: {})",
            wm.get()
        )))
    }
}

/// How long a read at `ReadAt::AtLeast` waits for its sequence.
const MIN_SEQ_WAIT: Duration = Duration::from_secs(5);

fn count(ctx: &ConnCtx, name: &str, outcome: &str) {
    if let Some(m) = &ctx.metrics {
        m.requests.with_label_values(&[name, outcome]).inc();
    }
}

fn timed_read<T>(ctx: &ConnCtx, op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    // Counts are kept by the store itself; the server adds latency.
    let t0 = std::time::Instant::now();
    let r = f();
    if let Some(m) = &ctx.metrics {
        m.read_seconds
            .with_label_values(&[op])
            .observe(t0.elapsed().as_secs_f64());
    }
    r
}

/// Streams a subscription until it is cancelled, fails, or the server
/// shuts down. Returns the outcome label for metrics.
async fn subscription(
    ctx: &Arc<ConnCtx>,
    id: u64,
    opts: crate::stream::SubscribeOptions,
    mut cancel_rx: watch::Receiver<bool>,
) -> &'static str {
    let unregister = || {
        if let Ok(mut subs) = ctx.subs.lock() {
            subs.remove(&id);
        }
    };
    let mut sub = match ctx.t.subscribe(opts) {
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
        // A slow client fills the connection's queue; this waits (and the
        // subscription stops reading) instead of buffering without bound.
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
                move |headers: axum::http::HeaderMap| metrics_handler(st.clone(), headers)
            }),
        );
    let mut shutdown = state.shutdown.clone();
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.changed().await;
        })
        .await;
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

async fn metrics_handler(
    state: Arc<State>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    if state.cfg.token.is_some() {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        if !token_ok(&state.cfg.token, &given) {
            if let Some(m) = state.metrics() {
                m.auth_failures.inc();
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
    fn parses_worker_policies() {
        assert_eq!(
            "batch".parse::<WorkerPolicy>().ok(),
            Some(WorkerPolicy::Batch)
        );
        assert_eq!(
            "normal".parse::<WorkerPolicy>().ok(),
            Some(WorkerPolicy::Normal)
        );
        let e = "idle".parse::<WorkerPolicy>().err().map(|e| e.kind());
        assert_eq!(e, Some(ErrorKind::InvalidArgument));
        for p in [WorkerPolicy::Batch, WorkerPolicy::Normal] {
            assert_eq!(p.to_string().parse::<WorkerPolicy>().ok(), Some(p));
        }
    }

    /// The request workers really run at the asked policy.
    #[cfg(target_os = "linux")]
    #[test]
    fn request_workers_get_the_policy() {
        for (p, policy) in [
            (WorkerPolicy::Batch, libc::SCHED_BATCH),
            (WorkerPolicy::Normal, libc::SCHED_OTHER),
        ] {
            let rt = request_runtime(p).expect("runtime");
            let got = rt
                .block_on(async { tokio::spawn(async { crate::sched::current() }).await })
                .expect("task");
            assert_eq!(got.0, policy, "{p}");
        }
    }
}
