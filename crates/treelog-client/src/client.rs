//! The reconnecting handle: requests go to the current connection; a lost
//! one is replaced on the next request by trying the endpoints in turn,
//! with back-off, within each request's deadline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::command::Command;
use crate::connection::{Connection, Failure, OpenError};
use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind, Result};
use crate::options::{ClientOptions, SeenSeq};
use crate::protocol::{self, RequestBody, ResponseBody};
use crate::Caller;

/// What may be done with a request whose connection was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Reads (and other requests that change nothing, or nothing twice):
    /// sent again on the next connection.
    Read,
    /// A lost mutation may have been applied: `OutcomeUnknown`.
    Mutation,
    /// Anything else: the loss is returned as it is.
    Other,
}

impl Class {
    fn of(body: &RequestBody) -> Class {
        use RequestBody as B;
        match body {
            B::Mutate(_) => Class::Mutation,
            B::Stat { .. }
            | B::StatId { .. }
            | B::List { .. }
            | B::StatAt { .. }
            | B::StatIdAt { .. }
            | B::ListAt { .. }
            | B::Readlink { .. }
            | B::GetXattrs { .. }
            | B::Count { .. }
            | B::ListCursors
            | B::Ack { .. }
            | B::WaitFor { .. }
            | B::Ping
            | B::Info
            | B::Status
            | B::PinView
            | B::UnpinView { .. } => Class::Read,
            _ => Class::Other,
        }
    }
}

pub(crate) fn deadline_error(what: &str) -> Error {
    Error::DeadlineExceeded(what.to_owned())
}

/// What the handles of one client share: the endpoints, the current
/// connection, the leader's.
pub(crate) struct Shared {
    pub(crate) opts: ClientOptions,
    pub(crate) seen: SeenSeq,
    /// The open connection and the index of its endpoint.
    current: Mutex<Option<(Arc<Connection>, usize)>>,
    /// One reconnect at a time; the other requests wait for its outcome.
    connecting: tokio::sync::Mutex<()>,
    /// The endpoint tried first at the next connect.
    next: AtomicUsize,
    last_peer: Mutex<Option<SocketAddr>>,
    committed_at_connect: AtomicU64,
    /// The leader's connection and its name, once a mutation was sent
    /// there (`ClientOptions::follow_leader`).
    pub(crate) leader: tokio::sync::Mutex<Option<(String, Arc<Connection>)>>,
}

impl Shared {
    pub(crate) fn new(opts: ClientOptions, seen: SeenSeq, first: usize) -> Shared {
        Shared {
            opts,
            seen,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            next: AtomicUsize::new(first),
            last_peer: Mutex::new(None),
            committed_at_connect: AtomicU64::new(0),
            leader: tokio::sync::Mutex::new(None),
        }
    }

    fn endpoints(&self) -> &[Endpoint] {
        &self.opts.endpoints
    }

    fn open_current(&self) -> Option<Arc<Connection>> {
        let cur = self.current.lock().ok()?;
        cur.as_ref()
            .filter(|(c, _)| c.is_open())
            .map(|(c, _)| c.clone())
    }

    /// The endpoint index of the open connection, if any.
    pub(crate) fn current_index(&self) -> Option<usize> {
        let cur = self.current.lock().ok()?;
        cur.as_ref().map(|(_, i)| *i)
    }

    /// Forgets `conn` after a failure (closing it), and makes the next
    /// connect start at the endpoint after its own.
    pub(crate) fn discard(&self, conn: &Arc<Connection>, why: &Error) {
        conn.close(why);
        if let Ok(mut cur) = self.current.lock() {
            if let Some((c, i)) = cur.as_ref() {
                if Arc::ptr_eq(c, conn) {
                    let n = self.endpoints().len().max(1);
                    self.next.store((i + 1) % n, Ordering::Relaxed);
                    *cur = None;
                }
            }
        }
    }

    /// Leaves the current connection, if any, for the next endpoint.
    pub(crate) fn rotate(&self, why: &Error) {
        let cur = self.current.lock().ok().and_then(|c| c.clone());
        if let Some((c, _)) = cur {
            self.discard(&c, why);
        }
    }

    /// The open connection, or a new one: the endpoints in turn, pausing
    /// with back-off between rounds, until `deadline`. Refusals that
    /// retrying cannot help are returned at once.
    pub(crate) async fn connection(&self, deadline: Option<Instant>) -> Result<Arc<Connection>> {
        if let Some(c) = self.open_current() {
            return Ok(c);
        }
        let _one = match deadline {
            Some(d) => tokio::time::timeout_at(d, self.connecting.lock())
                .await
                .map_err(|_| deadline_error("while another request was reconnecting"))?,
            None => self.connecting.lock().await,
        };
        if let Some(c) = self.open_current() {
            return Ok(c);
        }
        let mut backoff = Backoff::new();
        loop {
            let e = match self.connect_round(deadline).await {
                Ok(c) => return Ok(c),
                Err(OpenError::Refused(e)) => return Err(e),
                Err(OpenError::Unreachable(e)) => e,
            };
            let pause = backoff.next_pause();
            if let Some(d) = deadline {
                if Instant::now() + pause >= d {
                    return Err(deadline_error(&format!(
                        "no server could be reached in time: {e}"
                    )));
                }
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// One try of every endpoint (every address it resolves to now),
    /// starting at `next`.
    pub(crate) async fn connect_round(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Arc<Connection>, OpenError> {
        let n = self.endpoints().len();
        let start = self.next.load(Ordering::Relaxed);
        let mut last = OpenError::Unreachable(Error::InvalidArgument("no endpoint".into()));
        for k in 0..n {
            let i = (start + k) % n;
            match self.connect_endpoint(&self.endpoints()[i], deadline).await {
                Ok(c) => {
                    self.install(c.clone(), i);
                    return Ok(c);
                }
                Err(OpenError::Refused(e)) => return Err(OpenError::Refused(e)),
                Err(e) => last = e,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        Err(last)
    }

    fn install(&self, c: Arc<Connection>, i: usize) {
        self.next.store(i, Ordering::Relaxed);
        if let Ok(mut p) = self.last_peer.lock() {
            *p = Some(c.peer());
        }
        self.committed_at_connect
            .store(c.committed_at_connect(), Ordering::Relaxed);
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some((c, i));
        }
    }

    /// Resolves `ep` (now, never from a cache) and tries its addresses.
    pub(crate) async fn connect_endpoint(
        &self,
        ep: &Endpoint,
        deadline: Option<Instant>,
    ) -> Result<Arc<Connection>, OpenError> {
        let resolving = ep.resolve();
        let addrs = match deadline {
            Some(d) => tokio::time::timeout_at(d, resolving)
                .await
                .map_err(|_| OpenError::Unreachable(deadline_error(&format!("resolving {ep}"))))?,
            None => resolving.await,
        }
        .map_err(OpenError::Unreachable)?;
        // Over TLS without a server name of its own, a server named by a
        // host name must hold a certificate for that name (an IP literal:
        // for that address).
        let named_tls;
        let opts = match (&self.opts.tls, ep.host_name()) {
            (Some(tls), Some(name)) if !tls.has_server_name() => {
                let tls = tls.as_ref().clone().with_server_name(name).map_err(|e| {
                    OpenError::Refused(Error::InvalidArgument(format!("{ep}: {e}")))
                })?;
                named_tls = ClientOptions {
                    tls: Some(Arc::new(tls)),
                    ..self.opts.clone()
                };
                &named_tls
            }
            _ => &self.opts,
        };
        let mut last = None;
        for a in addrs {
            let mut limit = Instant::now() + self.opts.connect_timeout;
            if let Some(d) = deadline {
                limit = limit.min(d);
            }
            match Connection::open(a, opts, &self.seen, limit).await {
                Ok(c) => return Ok(c),
                Err(OpenError::Refused(e)) => return Err(OpenError::Refused(e)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            OpenError::Unreachable(Error::Protocol(format!("{ep} has no address")))
        }))
    }
}

/// A client of a treelog server, or of any of a list of them: requests
/// are pipelined over one connection at a time, replaced when it fails.
/// Clones share the connection; [`Client::with_deadline`] gives a handle
/// whose requests have another deadline.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    pub(crate) timeout: Option<Duration>,
    /// The user this handle's requests are made for (see
    /// [`Client::for_caller`]).
    pub(crate) caller: Option<Arc<Caller>>,
}

impl Client {
    /// Connects to the server at `addr` (the first endpoint; those of
    /// `opts.endpoints` follow) and performs the handshake: one try, within
    /// `connect_timeout` per address. Later requests reconnect by
    /// themselves.
    pub async fn connect(addr: SocketAddr, mut opts: ClientOptions) -> Result<Client> {
        let first = Endpoint::from(addr);
        opts.endpoints.retain(|e| *e != first);
        opts.endpoints.insert(0, first);
        Client::connect_with(opts).await
    }

    /// Connects to the first server of `endpoints` that answers
    /// (`"a:7400,b:7400,[::1]:7400"`; names are resolved at every
    /// connect), then those of `opts.endpoints`.
    pub async fn connect_to(endpoints: &str, mut opts: ClientOptions) -> Result<Client> {
        let mut list = Endpoint::parse_list(endpoints)?;
        for e in std::mem::take(&mut opts.endpoints) {
            if !list.contains(&e) {
                list.push(e);
            }
        }
        opts.endpoints = list;
        Client::connect_with(opts).await
    }

    /// Connects to the first of `opts.endpoints` that answers: each is
    /// tried once (a server down now is not waited for), within
    /// `request_timeout`.
    pub async fn connect_with(opts: ClientOptions) -> Result<Client> {
        if opts.endpoints.is_empty() {
            return Err(Error::InvalidArgument("no endpoint to connect to".into()));
        }
        let seen = opts.seen_seq.clone().unwrap_or_default();
        let timeout = Some(opts.request_timeout);
        let shared = Arc::new(Shared::new(opts, seen, 0));
        let deadline = Instant::now() + shared.opts.request_timeout;
        shared
            .connect_round(Some(deadline))
            .await
            .map_err(OpenError::into_error)?;
        Ok(Client {
            shared,
            timeout,
            caller: None,
        })
    }

    /// A handle (sharing this one's connections) whose requests each end
    /// within `d`.
    pub fn with_deadline(&self, d: Duration) -> Client {
        Client {
            shared: self.shared.clone(),
            timeout: Some(d),
            caller: self.caller.clone(),
        }
    }

    /// A handle whose requests wait as long as it takes.
    pub fn without_deadline(&self) -> Client {
        Client {
            shared: self.shared.clone(),
            timeout: None,
            caller: self.caller.clone(),
        }
    }

    /// A handle (sharing this one's connections) whose requests are made
    /// for `caller`: a server with `--enforce-permissions` checks them as
    /// that user, once this client's credential may act for users (role
    /// `proxy` or `admin`; docs/SECURITY.md). Streams are not checked.
    pub fn for_caller(&self, caller: Caller) -> Client {
        Client {
            shared: self.shared.clone(),
            timeout: self.timeout,
            caller: Some(Arc::new(caller)),
        }
    }

    /// The deadline of a request starting now.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| Instant::now() + t)
    }

    /// The address of the server connected to (the last one, while
    /// reconnecting).
    pub fn addr(&self) -> SocketAddr {
        if let Some(c) = self.shared.open_current() {
            return c.peer();
        }
        self.shared
            .last_peer
            .lock()
            .ok()
            .and_then(|p| *p)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The endpoints this client connects to, in order.
    pub fn endpoints(&self) -> &[Endpoint] {
        self.shared.endpoints()
    }

    /// The committed sequence the server reported in the last handshake.
    pub fn committed_at_connect(&self) -> u64 {
        self.shared.committed_at_connect.load(Ordering::Relaxed)
    }

    /// The highest sequence this client has seen in a reply (a token to
    /// pass as `ReadAt::AtLeast` to any node for read-your-writes).
    pub fn seen_seq(&self) -> u64 {
        self.shared.seen.seen()
    }

    /// This client's read-your-writes token (shared with the clients
    /// given the same [`ClientOptions::seen_seq`]).
    pub fn seen_token(&self) -> &SeenSeq {
        &self.shared.seen
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.shared.opts
    }

    /// The open connection, or a new one within the deadline.
    pub(crate) async fn connection(&self, deadline: Option<Instant>) -> Result<Arc<Connection>> {
        self.shared.connection(deadline).await
    }

    /// Sends one request and waits for its reply, within this handle's
    /// deadline. A request that did not reach a connection is sent on the
    /// next one; a read whose connection was lost is sent again; a
    /// mutation whose connection was lost after it was sent, or whose
    /// deadline passed then, is `OutcomeUnknown` (never sent again).
    pub async fn call(&self, body: RequestBody) -> Result<ResponseBody> {
        let deadline = self.deadline();
        let class = Class::of(&body);
        let mut backoff = Backoff::new();
        loop {
            let conn = self.connection(deadline).await?;
            let e = match conn
                .call(body.clone(), self.caller.as_deref(), deadline)
                .await
            {
                Ok(reply) => match protocol::response_error(&reply) {
                    // Refused by a server on its way out, so not applied:
                    // the next endpoint (or its successor) takes it.
                    Some(e) if e.kind() == ErrorKind::ShuttingDown && class != Class::Other => {
                        self.shared.discard(&conn, &e);
                        let pause = backoff.next_pause();
                        if deadline.is_some_and(|d| Instant::now() + pause >= d) {
                            return Err(e);
                        }
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Some(e) => return Err(e),
                    None => return Ok(reply),
                },
                Err(Failure::NotSent(e)) => {
                    self.shared.discard(&conn, &e);
                    continue;
                }
                Err(Failure::Deadline { sent }) => {
                    return Err(if sent && class == Class::Mutation {
                        Error::OutcomeUnknown(format!(
                            "no reply from {} before the deadline, after the command was sent",
                            conn.peer()
                        ))
                    } else {
                        deadline_error(&format!("waiting for {}", conn.peer()))
                    })
                }
                Err(Failure::Lost(e)) => e,
            };
            self.shared.discard(&conn, &e);
            if let Some(t) = conn.terminal() {
                return Err(t);
            }
            match class {
                Class::Read => {}
                Class::Mutation => {
                    return Err(match e {
                        Error::Protocol(m) => {
                            Error::OutcomeUnknown(format!("{m}, after the command was sent"))
                        }
                        e => e,
                    })
                }
                Class::Other => return Err(e),
            }
            // A read, sent again after a pause (a server that accepts and
            // drops connections is not hammered).
            let pause = backoff.next_pause();
            if deadline.is_some_and(|d| Instant::now() + pause >= d) {
                return Err(deadline_error(&format!("retrying after {e}")));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Sends read requests in one write and waits for all their replies
    /// with one wake-up. Each reply is checked as [`Client::call`] checks
    /// one; a batch whose connection was lost is sent again whole.
    pub(crate) async fn call_batch(
        &self,
        bodies: Vec<RequestBody>,
    ) -> Result<Vec<Result<ResponseBody>>> {
        debug_assert!(bodies.iter().all(|b| Class::of(b) == Class::Read));
        let deadline = self.deadline();
        let mut backoff = Backoff::new();
        loop {
            let conn = self.connection(deadline).await?;
            let e = match conn
                .call_batch(bodies.clone(), self.caller.as_deref(), deadline)
                .await
            {
                Ok(replies) => {
                    return Ok(replies
                        .into_iter()
                        .map(|r| {
                            let reply = r?;
                            match protocol::response_error(&reply) {
                                Some(e) => Err(e),
                                None => Ok(reply),
                            }
                        })
                        .collect())
                }
                Err(Failure::Deadline { .. }) => {
                    return Err(deadline_error(&format!("waiting for {}", conn.peer())))
                }
                Err(Failure::NotSent(e)) => {
                    self.shared.discard(&conn, &e);
                    continue;
                }
                Err(Failure::Lost(e)) => e,
            };
            self.shared.discard(&conn, &e);
            if let Some(t) = conn.terminal() {
                return Err(t);
            }
            let pause = backoff.next_pause();
            if deadline.is_some_and(|d| Instant::now() + pause >= d) {
                return Err(deadline_error(&format!("retrying after {e}")));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs a mutation; returns its sequence number. A connection lost
    /// after the command was sent gives `OutcomeUnknown`. With
    /// `follow_leader`, a `NotLeader` refusal (nothing was applied) sends it
    /// again to the leader named, or, when none is named or it cannot be
    /// reached, to the next endpoint after a pause, until `leader_wait` has
    /// passed (or the deadline).
    pub async fn submit(&self, cmd: Command) -> Result<u64> {
        if !self.options().follow_leader {
            return match self.call(RequestBody::Mutate(cmd)).await? {
                ResponseBody::Seq(s) => Ok(s),
                other => Err(crate::ops::unexpected(other)),
            };
        }
        crate::leader::submit_following(self, cmd).await
    }
}
