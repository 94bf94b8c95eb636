//! One RPC connection: its handshake, then its requests read in turn —
//! reads that need no wait answered at once (a burst in batches, each
//! batch's replies in one write); streams on the delivery runtime; the
//! rest answered together on the connection's `Answers` — with
//! back-pressure on the bytes of replies queued and on the requests in
//! flight; at the end, a `Fatal` frame saying why when it ended in error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use treelog::{Caller, Error, ErrorKind, Result, Treelog};
use treelog_proto::protocol::{self, ClientMsg, RequestBody, ServerMsg};
use treelog_proto::v1;

use crate::admission::Admission;
use crate::answers::Answers;
use crate::audit::Draft;
use crate::context::ConnCtx;
use crate::dispatch::{answer_read, answer_reads, is_stream, reply, request_name, stream, Read};
use crate::handshake::handshake;
use crate::incoming::{buffered, frame_buffered, read_sized, ReadHalf};
use crate::out::{send, Gathered, Out, GATHER_BYTES};
use crate::reads::{read_ready, READ_BATCH};
use crate::roles::audited;
use crate::state::State;
use crate::tls;

/// Serves the connection from `peer`, which holds the slot `admission`,
/// until the client closes it, an error (told to the client in a `Fatal`
/// frame), or the server shuts down.
pub(crate) async fn serve(
    sock: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    state: Arc<State>,
) -> Result<()> {
    let _ = sock.set_nodelay(true);
    let mut admission = admission;
    let Some(opened) = tls::open(sock, peer, &mut admission, &state).await else {
        return Ok(());
    };
    let (rd, wr) = opened.stream.into_split();
    let mut rd = buffered(rd);
    let (out, writer) = Out::spawn_writer(
        wr,
        state.cfg.max_conn_buffer_bytes,
        state.metrics().cloned(),
    );
    let result =
        serve_connection(&mut rd, &out, peer, admission, &state, opened.tls_identity).await;
    if let Err(e) = &result {
        fatal(&out, e, &state).await;
    }
    drop(out);
    let _ = writer.await;
    result
}

/// Tells the client the error that ends its connection (and counts the
/// client's own mistakes).
async fn fatal(out: &Out, e: &Error, state: &State) {
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
        out,
        &ServerMsg::Fatal {
            kind,
            message: e.to_string(),
        },
    )
    .await;
}

async fn serve_connection(
    rd: &mut ReadHalf,
    out: &Out,
    peer: SocketAddr,
    mut admission: Admission,
    state: &State,
    tls_identity: Option<String>,
) -> Result<()> {
    let Some(identity) = handshake(rd, out, peer, &mut admission, state).await? else {
        return Ok(());
    };
    let t = state
        .store
        .get()
        .cloned()
        .ok_or_else(|| Error::Protocol("store not open".into()))?;
    if !welcome(out, &t, state.cfg.max_frame).await {
        return Ok(());
    }
    let ctx = Arc::new(ConnCtx::new(
        t,
        out.clone(),
        state,
        identity,
        peer,
        tls_identity,
    ));
    let mut requests = Requests {
        rd,
        answers: Answers::spawn(out.clone()),
        ctx,
        tasks: JoinSet::new(),
        gathered: Gathered::default(),
        carried: None,
        shutdown: state.shutdown.clone(),
        max_frame: state.cfg.max_frame,
        idle_timeout: state.cfg.idle_timeout,
    };
    tracing::debug!(
        %peer,
        tls_identity = requests.ctx.tls_identity.as_deref(),
        "connection ready"
    );
    let result = requests.serve().await;
    requests.finish().await;
    result
}

/// Completes the handshake; false once the connection is gone.
async fn welcome(out: &Out, t: &Treelog, max_frame: usize) -> bool {
    send(
        out,
        &ServerMsg::Welcome {
            version: out.version(),
            server: format!("treelog {}", env!("CARGO_PKG_VERSION")),
            committed_seq: t.committed_seq(),
            // `validate` keeps it within u32.
            max_frame: u32::try_from(max_frame).unwrap_or(u32::MAX),
        },
    )
    .await
}

/// A connection's requests after its handshake, read in turn: reads that
/// need no wait answered at once (a lone one on this task, a pipelining
/// client's burst in batches on tasks of their own, each batch's replies
/// in one write); streams on tasks of their own; every other request
/// handed to the connection's [`Answers`].
struct Requests<'a> {
    rd: &'a mut ReadHalf,
    ctx: Arc<ConnCtx>,
    /// The connection's streams and batches of reads.
    tasks: JoinSet<()>,
    answers: Answers,
    /// Replies to reads answered here, not yet handed to the writer.
    gathered: Gathered,
    /// A message read while gathering a batch of reads, not part of it.
    carried: Option<Result<Option<(ClientMsg, usize)>>>,
    shutdown: watch::Receiver<bool>,
    max_frame: usize,
    idle_timeout: Duration,
}

impl Requests<'_> {
    /// Reads and starts requests until the client closes the connection,
    /// an error, or the server shuts down.
    async fn serve(&mut self) -> Result<()> {
        loop {
            while self.tasks.try_join_next().is_some() {}
            // Before this task waits for the socket, what it gathered goes.
            // So does a full buffer's worth: a client that keeps the
            // socket busy does not grow it without bound.
            let waits = self.carried.is_none() && !frame_buffered(self.rd);
            let flush = waits || self.gathered.len() >= GATHER_BYTES;
            if flush && !self.gathered.flush(&self.ctx.out).await {
                break;
            }
            let Some((id, body, named, bytes)) = self.next_request().await? else {
                break;
            };
            if self.ctx.out.version() == v1::VERSION {
                if let Some(e) = v1::refusal(&body) {
                    self.gathered
                        .respond(&self.ctx.out, id, protocol::error_body(&e));
                    continue;
                }
            }
            if let Err(e) = self.ctx.identity.check(&body) {
                self.refuse(id, &body, e).await;
                continue;
            }
            let caller = match self.ctx.caller_for(named) {
                Ok(c) => c,
                Err(e) => {
                    self.refuse(id, &body, e).await;
                    continue;
                }
            };
            if read_ready(&self.ctx, &body) {
                if frame_buffered(self.rd) {
                    // A pipelining client's burst: answered in batches on
                    // tasks of their own, so that this task reads (and
                    // the other cores answer) the rest meanwhile.
                    if !self.start_reads((id, body, caller), bytes).await {
                        break;
                    }
                } else {
                    // A lone read: answered here, with no task and no
                    // hop to another thread.
                    let reply = answer_read(&self.ctx, body, caller.as_ref());
                    self.gathered.respond(&self.ctx.out, id, reply);
                }
                continue;
            }
            if !self.start(id, body, caller, bytes).await {
                break;
            }
        }
        let _ = self.gathered.flush(&self.ctx.out).await;
        Ok(())
    }

    /// The next request, read once the client's queue has room; `None`
    /// when the client closed the connection or the server shuts down.
    async fn next_request(&mut self) -> Result<Option<(u64, RequestBody, Option<Caller>, usize)>> {
        if !self.wait_for_room().await {
            return Ok(None);
        }
        let msg = match self.carried.take() {
            Some(m) => m,
            None => {
                // With live subscriptions a quiet client is not idle.
                let wait = (!self.ctx.has_streams()).then_some(self.idle_timeout);
                tokio::select! {
                    _ = self.shutdown.changed() => return Ok(None),
                    m = read_sized(self.rd, self.max_frame, wait, self.ctx.out.version()) => m,
                }
            }
        };
        match msg? {
            Some((msg, bytes)) => {
                let (id, body, named) = request_of(msg)?;
                Ok(Some((id, body, named, bytes)))
            }
            None => Ok(None),
        }
    }

    /// Reads that need no wait, this one and those behind it already whole
    /// in the buffer (up to [`READ_BATCH`]), answered by one task and their
    /// replies sent in one write. False when the connection is ending.
    async fn start_reads(&mut self, first: Read, bytes: usize) -> bool {
        let mut batch = vec![first];
        let mut total = bytes;
        while batch.len() < READ_BATCH && frame_buffered(self.rd) {
            let next = read_sized(self.rd, self.max_frame, None, self.ctx.out.version()).await;
            match next {
                Ok(Some((ClientMsg::Request { id, body }, bytes))) if self.batches(&body) => {
                    // `batches` made sure the caller is known.
                    let caller = self.ctx.caller_for(None).unwrap_or(None);
                    batch.push((id, body, caller));
                    total += bytes;
                }
                other => {
                    self.carried = Some(other);
                    break;
                }
            }
        }
        let Some(permit) = self.ctx.admit(total).await else {
            return false;
        };
        self.tasks
            .spawn(answer_reads(self.ctx.clone(), batch, permit));
        true
    }

    /// Whether a plain request read behind a read joins its batch: a read
    /// that needs no wait, its role allows and its caller is known for
    /// (anything else is carried to the main loop, which refuses or starts
    /// it).
    fn batches(&self, body: &RequestBody) -> bool {
        read_ready(&self.ctx, body)
            && self.ctx.identity.check(body).is_ok()
            && self.ctx.caller_for(None).is_ok()
    }

    /// Back-pressure in bytes: while the replies queued for this client
    /// reach the bound, read none of its requests (TCP then holds the
    /// client back). False when the server shuts down meanwhile.
    async fn wait_for_room(&mut self) -> bool {
        if !self.ctx.out.full() {
            return true;
        }
        if let Some(m) = &self.ctx.metrics {
            m.backpressure.inc();
        }
        // What this task gathered counts once it is queued.
        if !self.gathered.flush(&self.ctx.out).await {
            return false;
        }
        tokio::select! {
            _ = self.shutdown.changed() => false,
            _ = self.ctx.out.room() => true,
        }
    }

    /// Starts request `id`: a stream on the delivery runtime, anything
    /// else handed to the connection's answers, once it has a place among
    /// the requests in flight. False when the connection is ending.
    async fn start(
        &mut self,
        id: u64,
        body: RequestBody,
        caller: Option<Caller>,
        bytes: usize,
    ) -> bool {
        // Subscriptions register before the next read, so that the idle
        // timeout never applies to a connection that carries one.
        let cancel = if is_stream(&body) {
            match self.ctx.register_stream(id) {
                Ok(rx) => Some(rx),
                Err(why) => {
                    let body = protocol::error_body(&Error::Busy(why.into()));
                    self.gathered.respond(&self.ctx.out, id, body);
                    return true;
                }
            }
        } else {
            None
        };
        let Some(permit) = self.ctx.admit(bytes).await else {
            return false;
        };
        let ctx = self.ctx.clone();
        match cancel {
            Some(cancel) => {
                let task = async move {
                    if let Some(m) = &ctx.metrics {
                        m.in_flight.inc();
                    }
                    stream(&ctx, id, body, caller, permit, cancel).await;
                    if let Some(m) = &ctx.metrics {
                        m.in_flight.dec();
                    }
                };
                self.tasks.spawn_on(task, &self.ctx.delivery);
                true
            }
            None => self
                .answers
                .add(Box::pin(reply(ctx, id, body, caller, permit))),
        }
    }

    /// Answers request `id` with `e` (its credential's role does not grant
    /// it): counted, and in the audit log when the request would be.
    async fn refuse(&mut self, id: u64, body: &RequestBody, e: Error) {
        self.ctx.count_denied();
        let name = request_name(body);
        self.ctx.count(name, e.kind().as_str());
        if self.ctx.auditing() && audited(body) {
            self.ctx
                .audit(Draft::of(name, body), e.kind().as_str(), None)
                .await;
        }
        self.gathered
            .respond(&self.ctx.out, id, protocol::error_body(&e));
    }

    /// Stops the streams; lets the other requests in flight finish and
    /// reply.
    async fn finish(mut self) {
        let _ = self.gathered.flush(&self.ctx.out).await;
        self.ctx.end_streams();
        self.answers.finish().await;
        while self.tasks.join_next().await.is_some() {}
    }
}

/// A client's request: its id, body and the caller it names (`RequestAs`).
fn request_of(msg: ClientMsg) -> Result<(u64, RequestBody, Option<Caller>)> {
    match msg {
        ClientMsg::Request { id, body } => Ok((id, body, None)),
        ClientMsg::RequestAs { id, caller, body } => Ok((id, body, Some(caller))),
        ClientMsg::Hello(_) => Err(Error::Protocol("Hello sent twice".into())),
    }
}
