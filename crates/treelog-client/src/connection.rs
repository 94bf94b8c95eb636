//! One connection to one server: the handshake, a writer task, a reader
//! task that routes replies to their waiters (requests are pipelined, each
//! with its own id), and a watchdog that pings a silent server and drops
//! the connection when it does not answer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::options::{ClientOptions, SeenSeq};
use crate::protocol::{self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use crate::Caller;

pub(crate) enum Waiter {
    One(oneshot::Sender<Result<ResponseBody>>),
    Many(mpsc::Sender<Result<ResponseBody>>),
    /// Reply `.1` of a batch sent in one write ([`Connection::call_batch`]).
    Batch(Arc<Batch>, usize),
}

/// The replies of a batch of requests, filled in by the reader task; its
/// caller is woken once, when the last one is in.
pub(crate) struct Batch {
    replies: Mutex<Vec<Option<Result<ResponseBody>>>>,
    remaining: AtomicUsize,
    done: tokio::sync::Notify,
}

impl Batch {
    fn answer(&self, i: usize, r: Result<ResponseBody>) {
        if let Ok(mut v) = self.replies.lock() {
            if let Some(slot) = v.get_mut(i) {
                if slot.is_none() {
                    *slot = Some(r);
                    if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                        self.done.notify_one();
                    }
                }
            }
        }
    }
}

/// Hashes the client's own request ids (sequential u64s, never chosen by
/// anyone else) with one multiplication: SipHash, the default, was a
/// tenth of a pipelined request's client-side cost.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing: sequential ids spread over the top bits, which
        // the table's probe uses.
        self.0 = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// Why a request on a connection got no reply.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection was closed before the request reached it: nothing
    /// was sent, another connection may take it.
    NotSent(Error),
    /// Sent, and the connection was lost before the reply.
    Lost(Error),
    /// The deadline passed; `sent`: after the request was handed to the
    /// connection.
    Deadline { sent: bool },
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The server, or the way to it, may come back: try again or elsewhere.
    Unreachable(Error),
    /// Trying again cannot help (a bad token, a refused credential, another
    /// protocol version, a certificate that does not verify).
    Refused(Error),
}

impl OpenError {
    pub(crate) fn into_error(self) -> Error {
        match self {
            OpenError::Unreachable(e) | OpenError::Refused(e) => e,
        }
    }
}

pub(crate) fn lost(why: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("connection lost: {why}"))
}

/// The error for a frame from the server above `ClientOptions::max_frame`
/// (`why` names its size and the limit).
fn too_large(why: &str) -> Error {
    Error::Protocol(format!(
        "the server sent a reply too large for this client: {why} bytes (ClientOptions::max_frame)"
    ))
}

fn copy_error(e: &Error) -> Error {
    match e {
        Error::Remote { kind, message } => Error::Remote {
            kind: *kind,
            message: message.clone(),
        },
        Error::Protocol(m) => Error::Protocol(m.clone()),
        other => Error::Protocol(other.to_string()),
    }
}

/// Kinds a server's `Fatal` at the handshake is final with.
fn refusal(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unauthorized | ErrorKind::PermissionDenied | ErrorKind::Incompatible
    )
}

pub(crate) struct Connection {
    out: mpsc::Sender<Vec<u8>>,
    /// `None` once the connection is gone: no request may wait after that.
    pending: Mutex<Option<HashMap<u64, Waiter, IdHash>>>,
    next_id: AtomicU64,
    committed_at_connect: u64,
    /// The highest sequence any reply carried, shared with the client's
    /// other connections and the clients given the same [`SeenSeq`].
    seen_seq: SeenSeq,
    /// Why the connection ended, when reconnecting cannot help (a reply
    /// larger than this client accepts).
    terminal: Mutex<Option<String>>,
    peer: SocketAddr,
    /// The TCP socket, for [`Connection::closed_by_peer`]: it stays open
    /// while `pending` is `Some` (the reader, which holds it, empties
    /// `pending` before it ends).
    fd: std::os::fd::RawFd,
    born: Instant,
    /// Milliseconds after `born` of the last bytes received.
    last_rx: Arc<AtomicU64>,
    /// The reader waits for a slow stream consumer: silence is not the
    /// server's.
    delivering: AtomicBool,
    /// The reader and the watchdog.
    tasks: Mutex<Vec<AbortHandle>>,
    writer: Mutex<Option<AbortHandle>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The writer is left to send what is queued: it ends when the
        // queue's sender (`out`) goes with this.
        self.abort_tasks(false);
    }
}

impl Connection {
    /// Connects to `addr` (with TLS when `opts.tls` says so) and performs
    /// the handshake, all before `limit`.
    pub(crate) async fn open(
        addr: SocketAddr,
        opts: &ClientOptions,
        seen: &SeenSeq,
        limit: Instant,
    ) -> Result<Arc<Connection>, OpenError> {
        let timed_out =
            || OpenError::Unreachable(Error::Protocol(format!("connecting to {addr} timed out")));
        let sock = tokio::time::timeout_at(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| {
                OpenError::Unreachable(Error::Protocol(format!("connecting to {addr}: {e}")))
            })?;
        let _ = sock.set_nodelay(true);
        if let Some(idle) = opts.keepalive {
            // Detects a peer gone without a word while nothing is sent
            // (the idle ping does so sooner, and for a paused peer too).
            let ka = socket2::TcpKeepalive::new()
                .with_time(idle)
                .with_interval(Duration::from_secs(5))
                .with_retries(3);
            let _ = socket2::SockRef::from(&sock).set_tcp_keepalive(&ka);
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
        match opts.tls.clone() {
            None => {
                let (rd, wr) = sock.into_split();
                Connection::start(rd, wr, addr, fd, opts, seen, limit).await
            }
            Some(tls) => {
                let s = tokio::time::timeout_at(limit, tls.connect(addr, sock))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| {
                        let err = Error::Protocol(format!("TLS handshake with {addr} failed: {e}"));
                        // rustls reports a certificate that does not verify
                        // as invalid data; anything else may be passing.
                        if e.kind() == std::io::ErrorKind::InvalidData {
                            OpenError::Refused(err)
                        } else {
                            OpenError::Unreachable(err)
                        }
                    })?;
                let (rd, wr) = tokio::io::split(s);
                Connection::start(rd, wr, addr, fd, opts, seen, limit).await
            }
        }
    }

    /// Performs the handshake on a connection's halves, and starts its
    /// reader, writer and watchdog tasks.
    async fn start<R, W>(
        rd: R,
        wr: W,
        addr: SocketAddr,
        fd: std::os::fd::RawFd,
        opts: &ClientOptions,
        seen: &SeenSeq,
        limit: Instant,
    ) -> Result<Arc<Connection>, OpenError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        use OpenError::{Refused, Unreachable};
        // Buffered: replies to pipelined requests arrive many per segment.
        let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
        let mut w = BufWriter::new(wr);
        let hello = protocol::encode(&ClientMsg::Hello(Hello {
            magic: protocol::MAGIC,
            version: protocol::PROTOCOL_VERSION,
            token: opts.token.clone(),
            client: format!("treelog-client {}", env!("CARGO_PKG_VERSION")),
        }))
        .map_err(Refused)?;
        let greet = async {
            w.write_all(&hello).await?;
            w.flush().await?;
            protocol::read_frame(&mut rd, opts.max_frame).await
        };
        let first = tokio::time::timeout_at(limit, greet)
            .await
            .map_err(|_| {
                Unreachable(Error::Protocol(format!(
                    "no handshake reply from {addr} in time (replaying its log, or overloaded?)"
                )))
            })?
            .map_err(|e| match e {
                Error::InvalidArgument(m) => Refused(too_large(&m)),
                e => Unreachable(lost(e)),
            })?
            .ok_or_else(|| {
                Unreachable(Error::Protocol(
                    "server closed the connection during the handshake".into(),
                ))
            })?;
        let committed = match protocol::decode::<ServerMsg>(&first).map_err(Refused)? {
            ServerMsg::Welcome {
                version,
                committed_seq,
                ..
            } => {
                if version != protocol::PROTOCOL_VERSION {
                    return Err(Refused(Error::Protocol(format!(
                        "server speaks protocol {version}"
                    ))));
                }
                committed_seq
            }
            ServerMsg::Fatal { kind, message } => {
                let e = protocol::remote_error(kind, message);
                return Err(if refusal(kind) {
                    Refused(e)
                } else {
                    Unreachable(e)
                });
            }
            ServerMsg::Response { .. } => {
                return Err(Refused(Error::Protocol(
                    "unexpected response before Welcome".into(),
                )))
            }
        };
        seen.saw(committed);
        let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(1024);
        let born = Instant::now();
        let last_rx = Arc::new(AtomicU64::new(0));
        let rd = Metered {
            inner: rd,
            last_rx: last_rx.clone(),
            born,
        };
        let conn = Arc::new(Connection {
            out: out_tx,
            pending: Mutex::new(Some(HashMap::default())),
            next_id: AtomicU64::new(1),
            committed_at_connect: committed,
            seen_seq: seen.clone(),
            terminal: Mutex::new(None),
            peer: addr,
            fd,
            born,
            last_rx,
            delivering: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            writer: Mutex::new(None),
        });
        let writer = tokio::spawn(protocol::write_loop(out_rx, w.into_inner()));
        let reader = tokio::spawn(read_loop(rd, Arc::downgrade(&conn), opts.max_frame));
        let watchdog = tokio::spawn(watch(
            Arc::downgrade(&conn),
            opts.idle_timeout,
            opts.ping_timeout,
        ));
        if let Ok(mut t) = conn.tasks.lock() {
            t.extend([reader.abort_handle(), watchdog.abort_handle()]);
        }
        if let Ok(mut w) = conn.writer.lock() {
            *w = Some(writer.abort_handle());
        }
        Ok(conn)
    }

    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub(crate) fn committed_at_connect(&self) -> u64 {
        self.committed_at_connect
    }

    pub(crate) fn is_open(&self) -> bool {
        self.pending.lock().map(|p| p.is_some()).unwrap_or(false)
    }

    /// Whether the server has already ended the connection, asked of the
    /// socket itself rather than of the reader, which may not have run
    /// since the end arrived (a leader killed a moment ago: its kernel sent
    /// the FIN, or a reset, as the process died). A mutation written after
    /// that would be lost unread, and reported `OutcomeUnknown` though no
    /// server ever saw it; asked first, it is sent on a new connection.
    /// One `recv(MSG_PEEK)`: 0 bytes is the end of the stream with
    /// nothing left unread; an error other than "nothing yet" is a reset.
    /// Bytes still unread (a reply, a TLS record) say nothing: the reader
    /// will see what follows them.
    ///
    /// Asked only of a connection with nothing in flight (a caller that
    /// waits for each reply, as one following a leader through a
    /// failover): with requests in flight the end would lose them all
    /// the same, and a pipelining caller pays no system call per request.
    fn closed_by_peer(&self) -> bool {
        let Ok(pending) = self.pending.lock() else {
            return false;
        };
        if !pending.as_ref().is_some_and(|p| p.is_empty()) {
            // Closed already (the send reports it), or requests in flight.
            return false;
        }
        // SAFETY: `pending` is `Some` and its lock is held, so the reader
        // has not ended and the socket it holds is still open: `fd` is
        // this connection's (see the field).
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
        // The socket is non-blocking (tokio's): a peek never waits.
        let peeked = socket2::SockRef::from(&fd).peek(&mut byte);
        match peeked {
            Ok(n) => n == 0,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }

    /// Why the connection ended, if retrying cannot help.
    pub(crate) fn terminal(&self) -> Option<Error> {
        let t = self.terminal.lock().ok()?;
        t.as_ref().map(|m| Error::Protocol(m.clone()))
    }

    fn abort_tasks(&self, writer: bool) {
        if let Ok(mut t) = self.tasks.lock() {
            for h in t.drain(..) {
                h.abort();
            }
        }
        if writer {
            if let Some(h) = self.writer.lock().ok().and_then(|mut w| w.take()) {
                h.abort();
            }
        }
    }

    /// Ends the connection: its waiters get `e`, its socket is closed
    /// (a writer stuck on a peer that stopped reading included).
    pub(crate) fn close(&self, e: &Error) {
        self.fail_all(e);
        self.abort_tasks(true);
    }

    fn fail_all(&self, e: &Error) {
        let waiters: Vec<Waiter> = match self.pending.lock() {
            Ok(mut p) => p
                .take()
                .map(|m| m.into_values().collect())
                .unwrap_or_default(),
            Err(_) => return,
        };
        for w in waiters {
            let err = copy_error(e);
            match w {
                Waiter::One(tx) => {
                    let _ = tx.send(Err(err));
                }
                Waiter::Many(tx) => {
                    let _ = tx.try_send(Err(err));
                }
                Waiter::Batch(b, i) => b.answer(i, Err(err)),
            }
        }
    }

    fn forget(&self, ids: std::ops::Range<u64>) {
        if let Ok(mut p) = self.pending.lock() {
            if let Some(p) = p.as_mut() {
                for id in ids {
                    p.remove(&id);
                }
            }
        }
    }

    /// Sends one request whose replies go to `waiter`; returns its id.
    pub(crate) async fn send(
        &self,
        body: RequestBody,
        caller: Option<&Caller>,
        waiter: Waiter,
        deadline: Option<Instant>,
    ) -> Result<u64, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = protocol::encode(&message(id, body, caller)).map_err(Failure::NotSent)?;
        self.send_frames(frame, id, std::iter::once(waiter), deadline)
            .await?;
        Ok(id)
    }

    /// Registers the waiters of the requests in `frames` (ids `first`,
    /// `first + 1`, ... in order), then hands the frames to the writer in
    /// one piece; unregisters them if the writer is gone or the deadline
    /// passes first (then nothing was sent).
    async fn send_frames(
        &self,
        frames: Vec<u8>,
        first: u64,
        waiters: impl Iterator<Item = Waiter>,
        deadline: Option<Instant>,
    ) -> Result<(), Failure> {
        let mut n = 0u64;
        {
            let mut p = self
                .pending
                .lock()
                .map_err(|_| Failure::NotSent(Error::Protocol("client state poisoned".into())))?;
            match p.as_mut() {
                Some(p) => {
                    for w in waiters {
                        p.insert(first + n, w);
                        n += 1;
                    }
                }
                None => return Err(Failure::NotSent(lost("the connection is closed"))),
            }
        }
        let sent = match deadline {
            None => self.out.send(frames).await.map_err(|_| false),
            Some(d) => match tokio::time::timeout_at(d, self.out.send(frames)).await {
                Ok(r) => r.map_err(|_| false),
                Err(_) => Err(true),
            },
        };
        match sent {
            Ok(()) => Ok(()),
            Err(timed_out) => {
                self.forget(first..first + n);
                Err(if timed_out {
                    Failure::Deadline { sent: false }
                } else {
                    Failure::NotSent(lost("writer stopped"))
                })
            }
        }
    }

    /// Sends one request and waits for its reply (an error reply is a
    /// reply: the caller reads it).
    pub(crate) async fn call(
        &self,
        body: RequestBody,
        caller: Option<&Caller>,
        deadline: Option<Instant>,
    ) -> Result<ResponseBody, Failure> {
        if matches!(body, RequestBody::Mutate(_)) && self.closed_by_peer() {
            // The caller drops the connection, as for any request not sent.
            return Err(Failure::NotSent(lost("closed by the server")));
        }
        let (tx, rx) = oneshot::channel();
        let id = self.send(body, caller, Waiter::One(tx), deadline).await?;
        let reply = match deadline {
            None => rx.await,
            Some(d) => match tokio::time::timeout_at(d, rx).await {
                Ok(r) => r,
                Err(_) => {
                    // No reply will be waited for: its slot goes.
                    self.forget(id..id + 1);
                    return Err(Failure::Deadline { sent: true });
                }
            },
        };
        match reply {
            Ok(Ok(body)) => {
                self.saw_in(&body);
                Ok(body)
            }
            Ok(Err(e)) => Err(Failure::Lost(e)),
            Err(_) => Err(Failure::Lost(lost("no reply"))),
        }
    }

    fn saw_in(&self, body: &ResponseBody) {
        match body {
            ResponseBody::Seq(s)
            | ResponseBody::InodeAt { seq: s, .. }
            | ResponseBody::PageAt { seq: s, .. }
            | ResponseBody::Target { seq: s, .. }
            | ResponseBody::Xattrs { seq: s, .. }
            | ResponseBody::Summary { seq: s, .. } => self.seen_seq.saw(*s),
            _ => {}
        }
    }

    /// Sends requests in one write and waits for all their replies with
    /// one wake-up: what a pipelining client does, without a task and a
    /// channel per request. Reads only: a lost batch of mutations could
    /// not say which of them committed.
    pub(crate) async fn call_batch(
        &self,
        bodies: Vec<RequestBody>,
        caller: Option<&Caller>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Result<ResponseBody>>, Failure> {
        let n = bodies.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let batch = Arc::new(Batch {
            replies: Mutex::new((0..n).map(|_| None).collect()),
            remaining: AtomicUsize::new(n),
            done: tokio::sync::Notify::new(),
        });
        let first = self.next_id.fetch_add(n as u64, Ordering::Relaxed);
        let mut frames = Vec::new();
        for (i, body) in bodies.into_iter().enumerate() {
            let id = first + i as u64;
            let f = protocol::encode(&message(id, body, caller)).map_err(Failure::NotSent)?;
            frames.extend_from_slice(&f);
        }
        let waiters = (0..n).map(|i| Waiter::Batch(batch.clone(), i));
        self.send_frames(frames, first, waiters, deadline).await?;
        let all_in = async {
            while batch.remaining.load(Ordering::Acquire) > 0 {
                batch.done.notified().await;
            }
        };
        if let Some(d) = deadline {
            if tokio::time::timeout_at(d, all_in).await.is_err() {
                self.forget(first..first + n as u64);
                return Err(Failure::Deadline { sent: true });
            }
        } else {
            all_in.await;
        }
        let replies = std::mem::take(
            &mut *batch
                .replies
                .lock()
                .map_err(|_| Failure::Lost(Error::Protocol("client state poisoned".into())))?,
        );
        let replies: Vec<Result<ResponseBody>> = replies
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(lost("no reply"))))
            .collect();
        // The connection's loss fails every reply alike.
        if let Some(Err(e)) = replies.iter().find(|r| r.is_err()) {
            if !self.is_open() {
                return Err(Failure::Lost(copy_error(e)));
            }
        }
        for r in replies.iter().flatten() {
            self.saw_in(r);
        }
        Ok(replies)
    }
}

/// The read half, noting when bytes last arrived: a large frame that is
/// still arriving is not silence.
struct Metered<R> {
    inner: R,
    last_rx: Arc<AtomicU64>,
    born: Instant,
}

impl<R: AsyncRead + Unpin> AsyncRead for Metered<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let ms = self.born.elapsed().as_millis() as u64;
            self.last_rx.store(ms, Ordering::Relaxed);
        }
        r
    }
}

/// Reads frames and routes each reply to its waiter, until the
/// connection ends; then fails the waiters left.
async fn read_loop<R: AsyncRead + Unpin>(mut rd: R, weak: Weak<Connection>, max_frame: usize) {
    let err = loop {
        let frame = match protocol::read_frame(&mut rd, max_frame).await {
            Ok(Some(f)) => f,
            Ok(None) => break lost("closed by the server"),
            // Too large for this client: retrying would meet it again, so
            // it ends subscriptions too.
            Err(Error::InvalidArgument(m)) => {
                let e = too_large(&m);
                if let Some(c) = weak.upgrade() {
                    if let Ok(mut t) = c.terminal.lock() {
                        *t = Some(match &e {
                            Error::Protocol(m) => m.clone(),
                            e => e.to_string(),
                        });
                    }
                }
                break e;
            }
            Err(e) => break lost(e),
        };
        let Some(c) = weak.upgrade() else { return };
        match protocol::decode::<ServerMsg>(&frame) {
            Ok(ServerMsg::Response { id, body }) => {
                let end = matches!(body, ResponseBody::StreamEnd)
                    || protocol::response_error(&body).is_some();
                let waiter = c.pending.lock().ok().and_then(|mut p| {
                    let p = p.as_mut()?;
                    match p.get(&id) {
                        Some(Waiter::Many(tx)) if !end => Some(Waiter::Many(tx.clone())),
                        _ => p.remove(&id),
                    }
                });
                match waiter {
                    Some(Waiter::One(tx)) => {
                        let _ = tx.send(Ok(body));
                    }
                    Some(Waiter::Many(tx)) => {
                        c.delivering.store(true, Ordering::Relaxed);
                        let _ = tx.send(Ok(body)).await;
                        c.delivering.store(false, Ordering::Relaxed);
                        c.last_rx
                            .store(c.born.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                    Some(Waiter::Batch(b, i)) => b.answer(i, Ok(body)),
                    None => {}
                }
            }
            Ok(ServerMsg::Fatal { kind, message }) => break protocol::remote_error(kind, message),
            Ok(ServerMsg::Welcome { .. }) => break Error::Protocol("unexpected Welcome".into()),
            Err(e) => break lost(e),
        }
    };
    if let Some(c) = weak.upgrade() {
        c.fail_all(&err);
    }
}

/// Pings a connection that received nothing for `idle`, and closes it
/// when the ping is not answered within `ping`: a paused or cut-off
/// server is noticed long before TCP would.
async fn watch(weak: Weak<Connection>, idle: Duration, ping: Duration) {
    let every = (idle / 4).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        let Some(c) = weak.upgrade() else { return };
        if !c.is_open() {
            return;
        }
        let quiet = c
            .born
            .elapsed()
            .saturating_sub(Duration::from_millis(c.last_rx.load(Ordering::Relaxed)));
        if quiet < idle || c.delivering.load(Ordering::Relaxed) {
            continue;
        }
        let (tx, rx) = oneshot::channel();
        let limit = Instant::now() + ping;
        let id = match c
            .send(RequestBody::Ping, None, Waiter::One(tx), Some(limit))
            .await
        {
            Ok(id) => id,
            Err(Failure::Deadline { .. }) => {
                c.close(&lost(format!(
                    "the connection to {} took no request for {ping:?}",
                    c.peer
                )));
                return;
            }
            Err(_) => return,
        };
        drop(c);
        let answered = tokio::time::timeout_at(limit, rx).await.is_ok();
        let Some(c) = weak.upgrade() else { return };
        if !answered {
            c.forget(id..id + 1);
            // A reader held up by a slow consumer could not read the
            // answer: not the server's silence.
            if !c.delivering.load(Ordering::Relaxed) {
                c.close(&lost(format!(
                    "{} did not answer a ping within {ping:?} after {quiet:?} of silence",
                    c.peer
                )));
                return;
            }
        }
    }
}

/// Request `id`, made for `caller` when there is one.
fn message(id: u64, body: RequestBody, caller: Option<&Caller>) -> ClientMsg {
    match caller {
        None => ClientMsg::Request { id, body },
        Some(c) => ClientMsg::RequestAs {
            id,
            caller: c.clone(),
            body,
        },
    }
}
