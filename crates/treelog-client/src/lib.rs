//! The async Rust client of `treelog serve`.
//!
//! One [`Client`] is one TCP connection carrying many requests at once
//! (pipelining): each request gets an id, and replies are matched back to
//! their caller as they arrive. Subscriptions get a connection of their own
//! ([`Client::subscribe`]) so that they can be resumed independently: after a
//! lost connection, a [`RemoteSubscription`] reconnects and resubscribes from
//! the last position it delivered (or restarts an unfinished snapshot).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::command::Command;
use crate::cursor::CursorInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::{ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use crate::read::{Read, ReadAt};
use crate::stream::{StartFrom, StreamItem, SubscribeOptions};
use crate::types::{ContentSummary, DirEntry, Inode, ListPage, Xattr, XattrFlag};
use treelog_proto::{command, cursor, error, path, protocol, read, stream, types};
pub use treelog_tls::ClientTls;

mod named;
pub use named::{check_host_port, resolve};

/// How to reach a server. (Its `Debug` leaves the token out.)
#[derive(Clone)]
pub struct ClientOptions {
    pub token: Option<String>,
    pub max_frame: usize,
    pub connect_timeout: Duration,
    /// How long a subscription keeps trying to reconnect before it gives up.
    pub resume_for: Duration,
    /// The read-your-writes token this client shares with others (see
    /// [`SeenSeq`]); `None`: a token of its own.
    pub seen_seq: Option<SeenSeq>,
    /// Send a mutation that a replica or a cluster's follower refused
    /// (`NotLeader`: it was not applied) to the leader it names, over a
    /// connection opened then and kept for the next ones; when none is
    /// named (a Raft election under way), or the named one cannot be
    /// reached, try again for up to `leader_wait`. Reads stay on this
    /// connection.
    pub follow_leader: bool,
    /// How long a mutation keeps looking for the leader (`follow_leader`).
    pub leader_wait: Duration,
    /// Connect over TLS, verifying the server against this configuration
    /// (its CA, the server name it expects, the client's own certificate
    /// for mutual TLS); `None`: plaintext.
    pub tls: Option<Arc<ClientTls>>,
}

/// The highest sequence a set of clients has seen in any reply (a write's
/// sequence, the state a read was at): every `stat` and `list` asks the
/// node for a state at least that new (`ReadAt::AtLeast`). Clients built
/// with the same token — one writing on the leader, one reading on a
/// replica — never read a state older than one they have seen; a replica
/// that has not caught up within its bound answers `Lagging`.
#[derive(Debug, Clone, Default)]
pub struct SeenSeq(Arc<AtomicU64>);

impl SeenSeq {
    pub fn new() -> SeenSeq {
        SeenSeq::default()
    }

    /// The highest sequence seen.
    pub fn seen(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Raises the token to `seq` (a sequence learned elsewhere).
    pub fn saw(&self, seq: u64) {
        self.0.fetch_max(seq, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_frame", &self.max_frame)
            .field("connect_timeout", &self.connect_timeout)
            .field("resume_for", &self.resume_for)
            .field("seen_seq", &self.seen_seq)
            .field("follow_leader", &self.follow_leader)
            .field("leader_wait", &self.leader_wait)
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            token: None,
            max_frame: 256 << 20,
            connect_timeout: Duration::from_secs(5),
            resume_for: Duration::from_secs(60),
            seen_seq: None,
            follow_leader: false,
            leader_wait: Duration::from_secs(5),
            tls: None,
        }
    }
}

enum Waiter {
    One(oneshot::Sender<Result<ResponseBody>>),
    Many(mpsc::Sender<Result<ResponseBody>>),
    /// Reply `.1` of a batch sent in one write ([`Client::stat_many`]).
    Batch(Arc<Batch>, usize),
}

/// The replies of a batch of requests, filled in by the reader task; its
/// caller is woken once, when the last one is in.
struct Batch {
    replies: Mutex<Vec<Option<Result<ResponseBody>>>>,
    remaining: std::sync::atomic::AtomicUsize,
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

struct Inner {
    out: mpsc::Sender<Vec<u8>>,
    /// `None` once the connection is gone: no request may wait after that.
    pending: Mutex<Option<HashMap<u64, Waiter, IdHash>>>,
    next_id: AtomicU64,
    committed_at_connect: u64,
    /// The highest sequence any reply carried (a mutation's, a read's
    /// state, a `Ping`): a read-your-writes token for any node, shared
    /// with the other clients given the same [`SeenSeq`].
    seen_seq: SeenSeq,
    /// Why the connection ended, when reconnecting cannot help (a reply
    /// larger than this client accepts): subscriptions end with it
    /// instead of resuming.
    terminal: Mutex<Option<String>>,
    /// The leader's connection, once a replica sent a mutation there
    /// (`ClientOptions::follow_leader`).
    leader: tokio::sync::Mutex<Option<Client>>,
}

/// A connection to a treelog server.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    addr: SocketAddr,
    opts: ClientOptions,
}

fn lost(why: impl std::fmt::Display) -> Error {
    Error::Protocol(format!("connection lost: {why}"))
}

/// The error for a frame from the server above `ClientOptions::max_frame`
/// (`why` names its size and the limit).
fn too_large(why: &str) -> Error {
    Error::Protocol(format!(
        "the server sent a reply too large for this client: {why} bytes (ClientOptions::max_frame)"
    ))
}

fn protocol_message(e: &Error) -> String {
    match e {
        Error::Protocol(m) => m.clone(),
        e => e.to_string(),
    }
}

fn fail_all(inner: &Inner, e: &Error) {
    let waiters: Vec<Waiter> = match inner.pending.lock() {
        Ok(mut p) => p
            .take()
            .map(|m| m.into_values().collect())
            .unwrap_or_default(),
        Err(_) => return,
    };
    for w in waiters {
        let err = match e {
            Error::Remote { kind, message } => Error::Remote {
                kind: *kind,
                message: message.clone(),
            },
            Error::Protocol(m) => Error::Protocol(m.clone()),
            other => Error::Protocol(other.to_string()),
        };
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

impl Client {
    /// Connects (with TLS when `opts.tls` says so; the TCP connection and
    /// the TLS handshake within `connect_timeout`) and performs the
    /// handshake.
    pub async fn connect(addr: SocketAddr, opts: ClientOptions) -> Result<Client> {
        let timed_out = || Error::Protocol(format!("connecting to {addr} timed out"));
        let deadline = tokio::time::Instant::now() + opts.connect_timeout;
        let sock = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())??;
        let _ = sock.set_nodelay(true);
        match opts.tls.clone() {
            None => {
                let (rd, wr) = sock.into_split();
                Client::start(rd, wr, addr, opts).await
            }
            Some(tls) => {
                let s = tokio::time::timeout_at(deadline, tls.connect(addr, sock))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| {
                        Error::Protocol(format!("TLS handshake with {addr} failed: {e}"))
                    })?;
                let (rd, wr) = tokio::io::split(s);
                Client::start(rd, wr, addr, opts).await
            }
        }
    }

    /// Performs the handshake on a connection's halves, and starts its
    /// reader and writer tasks.
    async fn start<R, W>(rd: R, wr: W, addr: SocketAddr, opts: ClientOptions) -> Result<Client>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        // Buffered: replies to pipelined requests arrive many per segment.
        let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
        let mut w = BufWriter::new(wr);
        let hello = protocol::encode(&ClientMsg::Hello(Hello {
            magic: protocol::MAGIC,
            version: protocol::PROTOCOL_VERSION,
            token: opts.token.clone(),
            client: format!("treelog-client {}", env!("CARGO_PKG_VERSION")),
        }))?;
        w.write_all(&hello).await?;
        w.flush().await?;
        let first = tokio::time::timeout(
            opts.connect_timeout,
            protocol::read_frame(&mut rd, opts.max_frame),
        )
        .await
        .map_err(|_| {
            Error::Protocol(format!(
                "no handshake reply from {addr} within {} s (replaying its log, or overloaded?)",
                opts.connect_timeout.as_secs_f64()
            ))
        })?
        .map_err(|e| match e {
            Error::InvalidArgument(m) => too_large(&m),
            e => e,
        })?
        .ok_or_else(|| {
            Error::Protocol("server closed the connection during the handshake".into())
        })?;
        let committed = match protocol::decode::<ServerMsg>(&first)? {
            ServerMsg::Welcome {
                version,
                committed_seq,
                ..
            } => {
                if version != protocol::PROTOCOL_VERSION {
                    return Err(Error::Protocol(format!("server speaks protocol {version}")));
                }
                committed_seq
            }
            ServerMsg::Fatal { kind, message } => {
                return Err(protocol::remote_error(kind, message))
            }
            ServerMsg::Response { .. } => {
                return Err(Error::Protocol("unexpected response before Welcome".into()))
            }
        };
        let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(1024);
        let inner = Arc::new(Inner {
            out: out_tx,
            pending: Mutex::new(Some(HashMap::default())),
            next_id: AtomicU64::new(1),
            committed_at_connect: committed,
            seen_seq: {
                let seen = opts.seen_seq.clone().unwrap_or_default();
                seen.saw(committed);
                seen
            },
            terminal: Mutex::new(None),
            leader: tokio::sync::Mutex::new(None),
        });
        tokio::spawn(protocol::write_loop(out_rx, w.into_inner()));
        // Reader task: routes replies to their waiters.
        let weak = Arc::downgrade(&inner);
        let max_frame = opts.max_frame;
        tokio::spawn(async move {
            let err = loop {
                let frame = match protocol::read_frame(&mut rd, max_frame).await {
                    Ok(Some(f)) => f,
                    Ok(None) => break lost("closed by the server"),
                    // Too large for this client: retrying would meet it
                    // again, so it ends subscriptions too.
                    Err(Error::InvalidArgument(m)) => {
                        let e = too_large(&m);
                        if let Some(inner) = weak.upgrade() {
                            if let Ok(mut t) = inner.terminal.lock() {
                                *t = Some(protocol_message(&e));
                            }
                        }
                        break e;
                    }
                    Err(e) => break lost(e),
                };
                let Some(inner) = weak.upgrade() else { return };
                match protocol::decode::<ServerMsg>(&frame) {
                    Ok(ServerMsg::Response { id, body }) => {
                        let end = matches!(body, ResponseBody::StreamEnd)
                            || protocol::response_error(&body).is_some();
                        let waiter = inner.pending.lock().ok().and_then(|mut p| {
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
                                let _ = tx.send(Ok(body)).await;
                            }
                            Some(Waiter::Batch(b, i)) => b.answer(i, Ok(body)),
                            None => {}
                        }
                    }
                    Ok(ServerMsg::Fatal { kind, message }) => {
                        break protocol::remote_error(kind, message)
                    }
                    Ok(ServerMsg::Welcome { .. }) => {
                        break Error::Protocol("unexpected Welcome".into())
                    }
                    Err(e) => break lost(e),
                }
            };
            if let Some(inner) = weak.upgrade() {
                fail_all(&inner, &err);
            }
        });
        Ok(Client { inner, addr, opts })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The committed sequence the server reported in the handshake.
    pub fn committed_at_connect(&self) -> u64 {
        self.inner.committed_at_connect
    }

    /// Why the connection ended, if retrying cannot help.
    fn terminal(&self) -> Option<Error> {
        let t = self.inner.terminal.lock().ok()?;
        t.as_ref().map(|m| Error::Protocol(m.clone()))
    }

    async fn send_request(&self, body: RequestBody, waiter: Waiter) -> Result<u64> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = protocol::encode(&ClientMsg::Request { id, body })?;
        self.send_frames(frame, id, std::iter::once(waiter)).await?;
        Ok(id)
    }

    /// Registers the waiters of the requests in `frames` (ids `first`,
    /// `first + 1`, ... in order), then hands the frames to the writer in
    /// one piece; unregisters them if the writer is gone.
    async fn send_frames(
        &self,
        frames: Vec<u8>,
        first: u64,
        waiters: impl Iterator<Item = Waiter>,
    ) -> Result<()> {
        let mut n = 0u64;
        {
            let mut p = self
                .inner
                .pending
                .lock()
                .map_err(|_| Error::Protocol("client state poisoned".into()))?;
            match p.as_mut() {
                Some(p) => {
                    for w in waiters {
                        p.insert(first + n, w);
                        n += 1;
                    }
                }
                None => return Err(lost("the connection is closed")),
            }
        }
        if self.inner.out.send(frames).await.is_err() {
            if let Ok(mut p) = self.inner.pending.lock() {
                if let Some(p) = p.as_mut() {
                    for id in first..first + n {
                        p.remove(&id);
                    }
                }
            }
            return Err(lost("writer stopped"));
        }
        Ok(())
    }

    /// The highest sequence this client has seen in a reply (a token to
    /// pass as `ReadAt::AtLeast` to any node for read-your-writes).
    pub fn seen_seq(&self) -> u64 {
        self.inner.seen_seq.seen()
    }

    /// This client's read-your-writes token (shared with the clients
    /// given the same [`ClientOptions::seen_seq`]).
    pub fn seen_token(&self) -> &SeenSeq {
        &self.inner.seen_seq
    }

    fn saw(&self, seq: u64) {
        self.inner.seen_seq.saw(seq);
    }

    /// What a plain read asks for: a state at least as new as any this
    /// client's token has seen.
    fn read_at(&self) -> ReadAt {
        match self.seen_seq() {
            0 => ReadAt::Latest,
            s => ReadAt::AtLeast(s),
        }
    }

    /// Sends read requests in one write and waits for all their replies
    /// with one wake-up: what a pipelining client does, without a task
    /// and a channel per request. Each reply is checked as [`Client::call`]
    /// checks one. Reads only: a lost batch of mutations could not say
    /// which of them committed.
    async fn call_batch(&self, bodies: Vec<RequestBody>) -> Result<Vec<Result<ResponseBody>>> {
        let n = bodies.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        debug_assert!(bodies.iter().all(|b| !matches!(b, RequestBody::Mutate(_))));
        let batch = Arc::new(Batch {
            replies: Mutex::new((0..n).map(|_| None).collect()),
            remaining: std::sync::atomic::AtomicUsize::new(n),
            done: tokio::sync::Notify::new(),
        });
        let first = self.inner.next_id.fetch_add(n as u64, Ordering::Relaxed);
        let mut frames = Vec::new();
        for (i, body) in bodies.into_iter().enumerate() {
            let id = first + i as u64;
            frames.extend_from_slice(&protocol::encode(&ClientMsg::Request { id, body })?);
        }
        let waiters = (0..n).map(|i| Waiter::Batch(batch.clone(), i));
        self.send_frames(frames, first, waiters).await?;
        while batch.remaining.load(Ordering::Acquire) > 0 {
            batch.done.notified().await;
        }
        let replies = std::mem::take(
            &mut *batch
                .replies
                .lock()
                .map_err(|_| Error::Protocol("client state poisoned".into()))?,
        );
        Ok(replies
            .into_iter()
            .map(|r| {
                let reply = r.unwrap_or_else(|| Err(lost("no reply")))?;
                if let Some(e) = protocol::response_error(&reply) {
                    return Err(e);
                }
                if let ResponseBody::InodeAt { seq, .. } = &reply {
                    self.saw(*seq);
                }
                Ok(reply)
            })
            .collect())
    }

    /// Stats of many paths, sent in one write and answered together, each
    /// read-your-writes as [`Client::stat`]: a pipelined batch from one
    /// caller. The outer error is the connection's; each path has its own
    /// result.
    pub async fn stat_many(&self, paths: &[&str]) -> Result<Vec<Result<Inode>>> {
        let at = self.read_at();
        let bodies = paths
            .iter()
            .map(|p| RequestBody::StatAt {
                path: (*p).to_owned(),
                at,
            })
            .collect();
        Ok(self
            .call_batch(bodies)
            .await?
            .into_iter()
            .map(|r| match r? {
                ResponseBody::InodeAt { inode, .. } => Ok(inode),
                other => Err(unexpected(other)),
            })
            .collect())
    }

    /// Sends one request and waits for its reply.
    pub async fn call(&self, body: RequestBody) -> Result<ResponseBody> {
        let (tx, rx) = oneshot::channel();
        let is_mutation = matches!(body, RequestBody::Mutate(_));
        self.send_request(body, Waiter::One(tx)).await?;
        // Sent: a mutation whose reply is lost may have been committed.
        let reply = match rx.await {
            Ok(r) => r,
            Err(_) => Err(lost("no reply")),
        };
        let reply = match reply {
            Err(Error::Protocol(m)) if is_mutation => {
                return Err(Error::OutcomeUnknown(format!(
                    "{m}, after the command was sent"
                )))
            }
            r => r?,
        };
        if let Some(e) = protocol::response_error(&reply) {
            return Err(e);
        }
        match &reply {
            ResponseBody::Seq(s)
            | ResponseBody::InodeAt { seq: s, .. }
            | ResponseBody::PageAt { seq: s, .. }
            | ResponseBody::Target { seq: s, .. }
            | ResponseBody::Xattrs { seq: s, .. }
            | ResponseBody::Summary { seq: s, .. } => self.saw(*s),
            _ => {}
        }
        Ok(reply)
    }

    /// Runs a mutation; returns its sequence number. A connection lost
    /// after the command was sent gives `OutcomeUnknown`. With
    /// `follow_leader`, a `NotLeader` refusal (nothing was applied) sends it
    /// again to the leader named, or after a pause when none is, until
    /// `leader_wait` has passed.
    pub async fn submit(&self, cmd: Command) -> Result<u64> {
        if !self.opts.follow_leader {
            return match self.call(RequestBody::Mutate(cmd)).await? {
                ResponseBody::Seq(s) => Ok(s),
                other => Err(unexpected(other)),
            };
        }
        let deadline = tokio::time::Instant::now() + self.opts.leader_wait;
        let mut pause = Duration::from_millis(10);
        // `None`: this connection.
        let mut target: Option<Client> = None;
        loop {
            let c = target.as_ref().unwrap_or(self);
            let err = match c.call(RequestBody::Mutate(cmd.clone())).await {
                Ok(ResponseBody::Seq(s)) => return Ok(s),
                Ok(other) => return Err(unexpected(other)),
                Err(e) => e,
            };
            let Error::NotLeader { leader } = &err else {
                return Err(err);
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(err);
            }
            target = match leader {
                // Not `submit`: the leader's connection does not follow.
                Some(l) if target.as_ref().is_none_or(|t| t.addr.to_string() != *l) => {
                    match self.leader(l).await {
                        Ok(c) => {
                            pause = Duration::from_millis(10);
                            Some(c)
                        }
                        // Not reached (it may have just died): nothing was
                        // sent; ask again after a pause.
                        Err(_) => None,
                    }
                }
                _ => None,
            };
            if target.is_none() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }

    /// The connection to the leader at `addr` (made on first use, made
    /// again when the leader changed or the connection was lost). It
    /// shares this client's read-your-writes token, and does not follow
    /// further itself.
    async fn leader(&self, addr: &str) -> Result<Client> {
        // A leader may be named by host name: resolved at every connect.
        let addrs = resolve(addr).await?;
        let mut held = self.inner.leader.lock().await;
        if let Some(c) = held.as_ref() {
            let open = c.inner.pending.lock().map(|p| p.is_some()).unwrap_or(false);
            if addrs.contains(&c.addr) && open {
                return Ok(c.clone());
            }
        }
        let c = Client::connect_named(
            addr,
            ClientOptions {
                seen_seq: Some(self.seen_token().clone()),
                follow_leader: false,
                ..self.opts.clone()
            },
        )
        .await?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Stat at a committed state (`docs/READS.md`); the reply says which.
    pub async fn stat_at(&self, path: &str, at: ReadAt) -> Result<Read<Inode>> {
        let body = RequestBody::StatAt {
            path: path.to_owned(),
            at,
        };
        match self.call(body).await? {
            ResponseBody::InodeAt { inode, seq } => Ok(Read { value: inode, seq }),
            other => Err(unexpected(other)),
        }
    }

    pub async fn stat_id_at(&self, id: u64, at: ReadAt) -> Result<Read<Inode>> {
        match self.call(RequestBody::StatIdAt { id, at }).await? {
            ResponseBody::InodeAt { inode, seq } => Ok(Read { value: inode, seq }),
            other => Err(unexpected(other)),
        }
    }

    /// A listing page at a committed state.
    pub async fn list_at(
        &self,
        path: &str,
        start_after: Option<&str>,
        limit: u32,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        let body = RequestBody::ListAt {
            path: path.to_owned(),
            start_after: start_after.map(str::to_owned),
            limit,
            at,
        };
        match self.call(body).await? {
            ResponseBody::PageAt { page, seq } => Ok(Read { value: page, seq }),
            other => Err(unexpected(other)),
        }
    }

    /// Pins the server's newest state for reads at `ReadAt::Exactly`
    /// (returned); see `Treelog::pin_view` for the bounds.
    pub async fn pin_view(&self) -> Result<u64> {
        match self.call(RequestBody::PinView).await? {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    pub async fn unpin_view(&self, seq: u64) -> Result<()> {
        match self.call(RequestBody::UnpinView { seq }).await? {
            ResponseBody::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every entry under `dir` (directory by directory, as `ls -R` lists
    /// them) at one committed state, pinned for the walk: a tree that
    /// moves meanwhile is never seen half-moved. Returns the entries with
    /// their paths, and the state's sequence.
    pub async fn walk(&self, dir: &str) -> Result<Read<Vec<(String, DirEntry)>>> {
        let seq = self.pin_view().await?;
        let r = self.walk_at(dir, seq).await;
        // Best effort: an unpinned view also expires by itself.
        let _ = self.unpin_view(seq).await;
        r.map(|value| Read { value, seq })
    }

    async fn walk_at(&self, dir: &str, seq: u64) -> Result<Vec<(String, DirEntry)>> {
        let at = ReadAt::Exactly(seq);
        let mut out = Vec::new();
        let mut dirs = vec![crate::path::canonical(dir)?];
        while let Some(d) = dirs.pop() {
            let mut after: Option<String> = None;
            let mut subdirs = Vec::new();
            loop {
                let page = self.list_at(&d, after.as_deref(), 1024, at).await?.value;
                for e in page.entries {
                    let p = crate::path::join(&d, &e.name);
                    if e.inode.attrs.kind.is_dir() {
                        subdirs.push(p.clone());
                    }
                    out.push((p, e));
                }
                match page.next_start_after {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            // Depth first, in name order: the last pushed is taken first.
            dirs.extend(subdirs.into_iter().rev());
        }
        Ok(out)
    }

    /// Stat at a state at least as new as any this client's token has
    /// seen (read-your-writes, on the leader or a replica).
    pub async fn stat(&self, path: &str) -> Result<Inode> {
        Ok(self.stat_at(path, self.read_at()).await?.value)
    }

    pub async fn stat_id(&self, id: u64) -> Result<Inode> {
        Ok(self.stat_id_at(id, self.read_at()).await?.value)
    }

    /// A listing page, read-your-writes as [`Client::stat`].
    pub async fn list(
        &self,
        path: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<ListPage> {
        Ok(self
            .list_at(path, start_after, limit, self.read_at())
            .await?
            .value)
    }

    /// `ln -s TARGET PATH` (see `Command::Symlink`).
    pub async fn symlink(&self, target: &str, path: &str) -> Result<u64> {
        self.submit(Command::Symlink {
            target: target.to_owned(),
            path: path.to_owned(),
            parents: false,
            owner: String::new(),
            group: String::new(),
        })
        .await
    }

    pub async fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        flag: XattrFlag,
    ) -> Result<u64> {
        self.submit(Command::SetXattr {
            path: path.to_owned(),
            name: name.to_owned(),
            value: value.to_vec().into(),
            flag,
        })
        .await
    }

    pub async fn remove_xattr(&self, path: &str, name: &str) -> Result<u64> {
        self.submit(Command::RemoveXattr {
            path: path.to_owned(),
            name: name.to_owned(),
        })
        .await
    }

    pub async fn set_quota(
        &self,
        path: &str,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<u64> {
        self.submit(Command::SetQuota {
            path: path.to_owned(),
            inodes,
            bytes,
        })
        .await
    }

    pub async fn clear_quota(&self, path: &str) -> Result<u64> {
        self.submit(Command::ClearQuota {
            path: path.to_owned(),
        })
        .await
    }

    /// Counts the quota of `path` again (see [`Command::RecountQuota`]).
    pub async fn recount_quota(&self, path: &str) -> Result<u64> {
        self.submit(Command::RecountQuota {
            path: path.to_owned(),
        })
        .await
    }

    /// A symbolic link's target, read-your-writes as [`Client::stat`].
    pub async fn readlink(&self, path: &str) -> Result<String> {
        let body = RequestBody::Readlink {
            path: path.to_owned(),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Target { target, .. } => Ok(target),
            other => Err(unexpected(other)),
        }
    }

    /// The extended attribute `name` of `path`, or (`None`) all of them.
    pub async fn xattrs(&self, path: &str, name: Option<&str>) -> Result<Vec<Xattr>> {
        let body = RequestBody::GetXattrs {
            path: path.to_owned(),
            name: name.map(str::to_owned),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Xattrs { xattrs, .. } => Ok(xattrs),
            other => Err(unexpected(other)),
        }
    }

    /// The usage under `path` (`count`; see `Treelog::count`).
    pub async fn count(&self, path: &str) -> Result<ContentSummary> {
        let body = RequestBody::Count {
            path: path.to_owned(),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Summary { summary, .. } => Ok(summary),
            other => Err(unexpected(other)),
        }
    }

    pub async fn ack(&self, cursor: &str, seq: u64) -> Result<()> {
        self.call(RequestBody::Ack {
            cursor: cursor.to_owned(),
            seq,
        })
        .await
        .map(|_| ())
    }

    pub async fn cursors(&self) -> Result<Vec<CursorInfo>> {
        match self.call(RequestBody::ListCursors).await? {
            ResponseBody::Cursors(c) => Ok(c),
            other => Err(unexpected(other)),
        }
    }

    pub async fn drop_cursor(&self, cursor: &str) -> Result<()> {
        self.call(RequestBody::DropCursor {
            cursor: cursor.to_owned(),
        })
        .await
        .map(|_| ())
    }

    /// The server's committed sequence.
    pub async fn ping(&self) -> Result<u64> {
        match self.call(RequestBody::Ping).await? {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// (committed sequence, log start) of the server.
    pub async fn info(&self) -> Result<(u64, u64)> {
        match self.call(RequestBody::Info).await? {
            ResponseBody::Info {
                committed_seq,
                log_start,
                ..
            } => Ok((committed_seq, log_start)),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until the server's committed sequence reaches `seq`.
    pub async fn wait_for(&self, seq: u64, timeout: Duration) -> Result<u64> {
        match self
            .call(RequestBody::WaitFor {
                seq,
                timeout_ms: timeout.as_millis() as u64,
            })
            .await?
        {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// Sends a request answered with a stream of replies (`Replicate`,
    /// `Subscribe`) on this connection and returns them as they come,
    /// without resuming: the stream ends with `StreamEnd`, an error reply
    /// (returned as an error), or the connection's loss. At most `queue`
    /// replies wait unread: beyond, the connection stops reading.
    pub async fn stream(&self, body: RequestBody, queue: usize) -> Result<ReplyStream> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        self.send_request(body, Waiter::Many(tx)).await?;
        Ok(ReplyStream {
            _client: self.clone(),
            rx,
        })
    }

    /// Subscribes on a connection of its own, resumed automatically after a
    /// reconnect.
    pub async fn subscribe(&self, opts: SubscribeOptions) -> Result<RemoteSubscription> {
        let mut s = RemoteSubscription {
            addr: self.addr,
            // Its connections share this client's read-your-writes token.
            copts: ClientOptions {
                seen_seq: Some(self.seen_token().clone()),
                ..self.opts.clone()
            },
            opts,
            conn: None,
            position: None,
            in_snapshot: false,
            opened: false,
            reconnects: 0,
            ended: false,
        };
        s.open().await?;
        Ok(s)
    }
}

/// Replies of a streaming request (see [`Client::stream`]).
pub struct ReplyStream {
    _client: Client,
    rx: mpsc::Receiver<Result<ResponseBody>>,
}

impl ReplyStream {
    /// The next reply; `None` after `StreamEnd`. An error reply or the
    /// connection's loss is an error.
    pub async fn next(&mut self) -> Option<Result<ResponseBody>> {
        match self.rx.recv().await {
            Some(Ok(ResponseBody::StreamEnd)) => None,
            Some(Ok(body)) => match protocol::response_error(&body) {
                Some(e) => Some(Err(e)),
                None => Some(Ok(body)),
            },
            Some(Err(e)) => Some(Err(e)),
            None => Some(Err(lost("the connection ended"))),
        }
    }
}

fn unexpected(b: ResponseBody) -> Error {
    Error::Protocol(format!("unexpected reply {b:?}"))
}

struct SubConn {
    _client: Client,
    rx: mpsc::Receiver<Result<ResponseBody>>,
}

/// A subscription over the network. Use [`RemoteSubscription::next`] or
/// [`RemoteSubscription::into_stream`].
pub struct RemoteSubscription {
    addr: SocketAddr,
    copts: ClientOptions,
    opts: SubscribeOptions,
    conn: Option<SubConn>,
    /// Position of the last item delivered that completes one.
    position: Option<u64>,
    /// Between a SnapshotStart and its SnapshotEnd.
    in_snapshot: bool,
    /// Whether a subscription was opened before (so `open` resumes).
    opened: bool,
    reconnects: u64,
    /// Ended by an error that resuming cannot cure.
    ended: bool,
}

impl RemoteSubscription {
    /// Times the subscription reconnected and resumed.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The position to resume after (last delivered record or progress).
    pub fn position(&self) -> Option<u64> {
        self.position
    }

    async fn open(&mut self) -> Result<()> {
        let client = Client::connect(self.addr, self.copts.clone()).await?;
        let mut opts = self.opts.clone();
        // Keep the resync behaviour of the original request on resume.
        opts.resync_on_move_in = Some(
            opts.resync_on_move_in
                .unwrap_or(opts.from == StartFrom::Snapshot),
        );
        if self.opened {
            if self.in_snapshot || (self.position.is_none() && opts.from == StartFrom::Snapshot) {
                // A snapshot (initial or resync) was cut off: start it over.
                // Acks still go to the cursor by name.
                opts.from = StartFrom::Snapshot;
                opts.cursor = None;
            } else if let Some(p) = self.position {
                // Resume right after what was delivered.
                opts.from = StartFrom::Seq(p + 1);
                opts.cursor = None;
            }
        }
        if opts.from == StartFrom::Now {
            // Pin "now" to a sequence, so that a resume before the first
            // record still starts at the right place.
            let c = client.ping().await?;
            opts.from = StartFrom::Seq(c + 1);
            self.position = Some(c);
        }
        let (tx, rx) = mpsc::channel(1024);
        // Read-your-writes: the stream starts from a state at least as new
        // as any the token has seen.
        let body = match self.copts.seen_seq.as_ref().map(SeenSeq::seen) {
            Some(min_seq) if min_seq > 0 => RequestBody::SubscribeAt { opts, min_seq },
            _ => RequestBody::Subscribe(opts),
        };
        client.send_request(body, Waiter::Many(tx)).await?;
        self.opened = true;
        self.conn = Some(SubConn {
            _client: client,
            rx,
        });
        Ok(())
    }

    /// The next item. After a lost connection or a server shutdown it
    /// reconnects and resumes (for up to `resume_for`), so it returns an
    /// error only when that fails or the server refuses the subscription.
    /// An item larger than `ClientOptions::max_frame` ends the
    /// subscription with a `Protocol` error naming its size (resuming
    /// would meet it again); `None` after that.
    /// Every `SnapshotStart` means: replace your model with the snapshot.
    pub async fn next(&mut self) -> Option<Result<StreamItem>> {
        if self.ended {
            return None;
        }
        let deadline = tokio::time::Instant::now() + self.copts.resume_for;
        loop {
            if self.conn.is_none() {
                match self.open().await {
                    Ok(()) => self.reconnects += 1,
                    Err(e) => {
                        if tokio::time::Instant::now() >= deadline || !retryable(&e) {
                            return Some(Err(e));
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            let conn = self.conn.as_mut()?;
            match conn.rx.recv().await {
                Some(Ok(ResponseBody::Item(item))) => {
                    if let Some(p) = item.position() {
                        self.position = Some(p);
                    }
                    match item {
                        StreamItem::SnapshotStart { .. } => self.in_snapshot = true,
                        StreamItem::SnapshotEnd { .. } => self.in_snapshot = false,
                        _ => {}
                    }
                    return Some(Ok(item));
                }
                Some(Ok(ResponseBody::StreamEnd)) => {
                    // The server is shutting down: resume on its successor.
                    self.conn = None;
                }
                Some(Ok(other)) => {
                    if let Some(e) = protocol::response_error(&other) {
                        self.conn = None;
                        return Some(Err(e));
                    }
                    return Some(Err(unexpected(other)));
                }
                Some(Err(e)) => {
                    if let Some(t) = conn._client.terminal() {
                        return Some(Err(self.end(t)));
                    }
                    if !retryable(&e) {
                        return Some(Err(e));
                    }
                    self.conn = None;
                }
                None => {
                    if let Some(t) = conn._client.terminal() {
                        return Some(Err(self.end(t)));
                    }
                    self.conn = None;
                }
            }
        }
    }

    fn end(&mut self, e: Error) -> Error {
        self.ended = true;
        self.conn = None;
        e
    }

    /// As a `futures` stream.
    pub fn into_stream(self) -> impl futures_core::Stream<Item = Result<StreamItem>> {
        futures_util::stream::unfold(self, |mut s| async move { s.next().await.map(|r| (r, s)) })
    }
}

fn retryable(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Protocol | ErrorKind::Io | ErrorKind::ShuttingDown | ErrorKind::Busy
    )
}
