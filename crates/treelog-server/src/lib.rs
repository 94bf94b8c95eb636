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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify, Semaphore};

use treelog::{error, metrics, stream};
use treelog_proto::protocol;

mod admission;
mod auth;
mod backups;
mod config;
mod http;
mod listen;
mod logging;
mod server;
mod state;

pub use config::{
    request_runtime, BoxFuture, ClusterService, ClusterSlot, ServerConfig, WorkerPolicy,
    DEFAULT_MAX_CONN_BUFFER_BYTES, FD_RESERVE, MAX_MAX_FRAME, MIN_CONN_BUFFER_BYTES, MIN_MAX_FRAME,
};
pub use listen::{signal_handlers, Bound, Listeners};
pub use logging::{init_logging, LogFormat};
pub use server::{run, start, start_on, ServerHandle};

use crate::admission::Admission;
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{Metrics, READ_OPS};
use crate::protocol::{ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use crate::state::State;
use treelog::ReadAt;
use treelog::Treelog;

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

pub(crate) async fn connection(
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
    if !state
        .auth
        .check(peer.ip(), &hello.token, state.metrics())
        .await?
    {
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
