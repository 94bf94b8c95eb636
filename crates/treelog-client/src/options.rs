//! How a [`crate::Client`] reaches its servers, and how long it tries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::endpoint::Endpoint;
use treelog_tls::ClientTls;

/// How to reach a server. (Its `Debug` leaves the token out.)
#[derive(Clone)]
pub struct ClientOptions {
    pub token: Option<String>,
    pub max_frame: usize,
    /// One attempt to connect to one address: the TCP connection, the TLS
    /// handshake, and the server's `Welcome`.
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
    /// reached, try the other endpoints, pausing with back-off, for up to
    /// `leader_wait` (and within the request's deadline). Reads stay on
    /// the client's own connection.
    pub follow_leader: bool,
    /// How long a mutation keeps looking for the leader (`follow_leader`).
    pub leader_wait: Duration,
    /// Connect over TLS, verifying the server against this configuration
    /// (its CA, the server name it expects, the client's own certificate
    /// for mutual TLS); `None`: plaintext.
    pub tls: Option<Arc<ClientTls>>,
    /// The servers to connect to, in order of preference (see
    /// [`crate::Client::connect_to`]); `Client::connect(addr, ..)` puts
    /// `addr` first. Names are resolved at every connect, never cached.
    pub endpoints: Vec<Endpoint>,
    /// The bound of every request from start to end: connecting,
    /// reconnecting, following the leader and the reply
    /// ([`crate::Client::with_deadline`] changes it per handle).
    pub request_timeout: Duration,
    /// A connection that received nothing for this long sends a `Ping`
    /// (see `ping_timeout`).
    pub idle_timeout: Duration,
    /// A `Ping` not answered within this is a dead connection: it is
    /// dropped and its requests move on (a paused or cut-off server).
    pub ping_timeout: Duration,
    /// TCP keepalive on every socket: idle time before the first probe
    /// (probes then every 5 s, 3 of them); `None`: off.
    pub keepalive: Option<Duration>,
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
            .field("endpoints", &self.endpoints)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("ping_timeout", &self.ping_timeout)
            .field("keepalive", &self.keepalive)
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
            endpoints: Vec::new(),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(10),
            ping_timeout: Duration::from_secs(5),
            keepalive: Some(Duration::from_secs(10)),
        }
    }
}
