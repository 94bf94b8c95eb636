//! Streams of replies: a raw one on the client's connection
//! ([`Client::stream`]), and subscriptions on a connection of their own
//! that resume after a lost connection, on the next endpoint if need be
//! ([`Client::subscribe`]).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{deadline_error, Client, Shared};
use crate::connection::{lost, Connection, Failure, Waiter};
use crate::error::{Error, ErrorKind, Result};
use crate::ops::unexpected;
use crate::options::ClientOptions;
use crate::protocol::{self, RequestBody, ResponseBody};
use crate::stream::{StartFrom, StreamItem, SubscribeOptions};

fn failure_error(f: Failure, what: &str) -> Error {
    match f {
        Failure::NotSent(e) | Failure::Lost(e) => e,
        Failure::Deadline { .. } => deadline_error(what),
    }
}

impl Client {
    /// Sends a request answered with a stream of replies (`Replicate`,
    /// `Subscribe`) on this client's connection (made first if need be,
    /// within the deadline) and returns them as they come, without
    /// resuming: the stream ends with `StreamEnd`, an error reply
    /// (returned as an error), or the connection's loss. At most `queue`
    /// replies wait unread: beyond, the connection stops reading.
    pub async fn stream(&self, body: RequestBody, queue: usize) -> Result<ReplyStream> {
        let deadline = self.deadline();
        loop {
            let conn = self.connection(deadline).await?;
            let (tx, rx) = mpsc::channel(queue.max(1));
            match conn
                .send(body.clone(), None, Waiter::Many(tx), deadline)
                .await
            {
                Ok(_) => return Ok(ReplyStream { _conn: conn, rx }),
                Err(Failure::NotSent(e)) => self.shared.discard(&conn, &e),
                Err(f) => return Err(failure_error(f, "sending a stream's request")),
            }
        }
    }

    /// Subscribes on a connection of its own (to this client's endpoint
    /// first), resumed automatically after a reconnect, on any endpoint.
    pub async fn subscribe(&self, opts: SubscribeOptions) -> Result<RemoteSubscription> {
        // Its connections share this client's read-your-writes token.
        let copts = ClientOptions {
            seen_seq: Some(self.seen_token().clone()),
            ..self.options().clone()
        };
        let first = self.shared.current_index().unwrap_or(0);
        let shared = Arc::new(Shared::new(copts, self.seen_token().clone(), first));
        let mut s = RemoteSubscription {
            client: Client {
                shared,
                timeout: None,
                caller: None,
            },
            opts,
            conn: None,
            position: None,
            in_snapshot: false,
            opened: false,
            reconnects: 0,
            ended: false,
        };
        s.open(self.deadline()).await?;
        Ok(s)
    }
}

/// Replies of a streaming request (see [`Client::stream`]).
pub struct ReplyStream {
    _conn: Arc<Connection>,
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

struct SubConn {
    conn: Arc<Connection>,
    rx: mpsc::Receiver<Result<ResponseBody>>,
}

/// A subscription over the network. Use [`RemoteSubscription::next`] or
/// [`RemoteSubscription::into_stream`].
pub struct RemoteSubscription {
    /// The subscription's own client: its endpoints, its connection.
    client: Client,
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

    /// The address of the server the subscription is (or was last) on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.client.addr()
    }

    async fn open(&mut self, deadline: Option<Instant>) -> Result<()> {
        let conn = self.client.connection(deadline).await?;
        let r = self.subscribe_on(&conn, deadline).await;
        if let Err(e) = &r {
            self.client.shared.discard(&conn, e);
        }
        r
    }

    async fn subscribe_on(
        &mut self,
        conn: &Arc<Connection>,
        deadline: Option<Instant>,
    ) -> Result<()> {
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
            let c = match conn.call(RequestBody::Ping, None, deadline).await {
                Ok(ResponseBody::Seq(s)) => s,
                Ok(other) => {
                    return Err(
                        protocol::response_error(&other).unwrap_or_else(|| unexpected(other))
                    )
                }
                Err(f) => return Err(failure_error(f, "pinning the subscription's start")),
            };
            opts.from = StartFrom::Seq(c + 1);
            self.position = Some(c);
        }
        let (tx, rx) = mpsc::channel(1024);
        // Read-your-writes: the stream starts from a state at least as new
        // as any the token has seen.
        let body = match self.client.seen_seq() {
            min_seq if min_seq > 0 => RequestBody::SubscribeAt { opts, min_seq },
            _ => RequestBody::Subscribe(opts),
        };
        conn.send(body, None, Waiter::Many(tx), deadline)
            .await
            .map_err(|f| failure_error(f, "sending the subscription"))?;
        self.opened = true;
        self.conn = Some(SubConn {
            conn: conn.clone(),
            rx,
        });
        Ok(())
    }

    /// The next item. After a lost connection or a server shutdown it
    /// reconnects (to the endpoints in turn, with back-off) and resumes
    /// (for up to `resume_for`), so it returns an error only when that
    /// fails or the server refuses the subscription. An item larger than
    /// `ClientOptions::max_frame` ends the subscription with a `Protocol`
    /// error naming its size (resuming would meet it again); `None` after
    /// that. Every `SnapshotStart` means: replace your model with the
    /// snapshot.
    pub async fn next(&mut self) -> Option<Result<StreamItem>> {
        if self.ended {
            return None;
        }
        let deadline = Instant::now() + self.client.options().resume_for;
        let mut backoff = Backoff::new();
        loop {
            if self.conn.is_none() {
                match self.open(Some(deadline)).await {
                    Ok(()) => self.reconnects += 1,
                    Err(e) => {
                        let pause = backoff.next_pause();
                        if Instant::now() + pause >= deadline || !retryable(&e) {
                            return Some(Err(e));
                        }
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
            }
            let sub = self.conn.as_mut()?;
            let gone = match sub.rx.recv().await {
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
                // The server is shutting down: resume on its successor.
                Some(Ok(ResponseBody::StreamEnd)) => lost("the server ended the stream"),
                Some(Ok(other)) => {
                    let conn = sub.conn.clone();
                    self.conn = None;
                    let e = match protocol::response_error(&other) {
                        Some(e) => e,
                        None => unexpected(other),
                    };
                    self.client.shared.discard(&conn, &e);
                    return Some(Err(e));
                }
                Some(Err(e)) => {
                    if let Some(t) = sub.conn.terminal() {
                        return Some(Err(self.end(t)));
                    }
                    if !retryable(&e) {
                        return Some(Err(e));
                    }
                    e
                }
                None => {
                    if let Some(t) = sub.conn.terminal() {
                        return Some(Err(self.end(t)));
                    }
                    lost("the connection ended")
                }
            };
            if let Some(sub) = self.conn.take() {
                self.client.shared.discard(&sub.conn, &gone);
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
