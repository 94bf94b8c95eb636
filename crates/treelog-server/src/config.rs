//! The server's settings ([`ServerConfig`]) and their limits, the hook a
//! Raft node plugs into it ([`ClusterSlot`]), and the request workers'
//! runtime ([`request_runtime`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use treelog::{Error, Options, Result, Treelog};
use treelog_proto::protocol;
use treelog_tls::ServerTls;

use crate::streams::delivery::DeliveryPriority;

/// Server settings. (Its `Debug` leaves the token out.)
#[derive(Clone)]
pub struct ServerConfig {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub http: SocketAddr,
    /// When set, clients must present it in the handshake and HTTP callers
    /// (except `/healthz`, `/readyz`) as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// The credentials file (docs/SECURITY.md): each credential's role and
    /// secret's hash; reloaded when it changes and on SIGHUP.
    pub credentials: Option<PathBuf>,
    /// The TLS identities (certificate names) of the cluster's nodes: a
    /// connection presenting one has node powers (Raft, the replica
    /// stream, backup fetches) whatever its credential.
    pub peer_tls_names: Vec<String>,
    /// Where the audit log goes (`None`: off).
    pub audit_log: Option<crate::audit::AuditTarget>,
    /// Check every request made for a user (`RequestAs`) with POSIX's
    /// permission rules as that user, and every other request of a
    /// credential that is not an admin as the user named after it
    /// (docs/SECURITY.md, "Permissions"). Needs `credentials`.
    pub enforce_permissions: bool,
    /// Largest frame a client may send (see [`MIN_MAX_FRAME`],
    /// [`MAX_MAX_FRAME`]).
    pub max_frame: usize,
    /// RPC connections at once. At start it is checked against the
    /// process's open-file limit (whose soft value is raised to the hard
    /// one) and lowered, with a warning, when it does not fit.
    pub max_connections: usize,
    /// How many of the connections may be waiting for their handshake;
    /// `None`: a quarter of `max_connections` (at least 1). When a new
    /// connection finds them all taken, the oldest one waiting is closed:
    /// connections that never say Hello cannot lock clients out.
    pub max_handshaking: Option<usize>,
    pub max_in_flight: usize,
    /// Bytes of request frames one connection may have being answered at
    /// once; past it the server reads none of its requests until one
    /// finishes (a frame larger than this is answered alone).
    pub max_in_flight_bytes: usize,
    pub max_subscriptions: usize,
    /// Longest a snapshot subscription holds its RocksDB snapshot (which
    /// keeps every version it sees from compaction): a subscriber that has
    /// not read its snapshot by then is cut off with `Busy` (its stream
    /// resumes with a new snapshot when it subscribes again).
    pub max_snapshot_age: Duration,
    /// Longest a snapshot subscription may hold its snapshot without
    /// reading (its connection's queue full): then it is cut off as above.
    pub snapshot_stall_timeout: Duration,
    /// Bytes of encoded replies queued for one connection beyond which the
    /// server stops reading its requests and its subscriptions stop
    /// producing, until the client reads.
    pub max_conn_buffer_bytes: usize,
    /// Time a new connection has to send its Hello.
    pub handshake_timeout: Duration,
    /// A connection without subscriptions that sends no complete frame for
    /// this long is closed.
    pub idle_timeout: Duration,
    pub shutdown_grace: Duration,
    /// When the writer stops (a failed log write, fsync or index write),
    /// drain and end the server with `WriterStopped`, so that a service
    /// manager restarts it (the restart replays the log: nothing
    /// acknowledged is lost). Otherwise keep serving reads, with writes
    /// refused and `/readyz` failing, until an operator restarts it.
    pub exit_on_writer_failure: bool,
    /// HTTP connections at once; past it (or past the address's share) a
    /// probe is answered on a reserved slot and anything else 503.
    pub max_http_connections: usize,
    /// HTTP connections from one address (an IPv6 /64) at once.
    pub max_http_per_address: usize,
    /// An HTTP connection is closed this long after it was accepted.
    pub http_connection_age: Duration,
    /// Time an HTTP client has to send a request's headers (also the
    /// longest an idle keep-alive connection stays open).
    pub http_header_timeout: Duration,
    /// Serve the RPC port on a non-loopback address without a token.
    pub allow_insecure_listen: bool,
    /// TLS on the RPC port (each connection chooses by its first byte,
    /// unless `require_tls`), and on the HTTP port with `http_tls`.
    pub tls: Option<ServerTls>,
    /// Refuse plaintext RPC connections (needs `tls`).
    pub require_tls: bool,
    /// Serve the HTTP port over TLS only, with `tls`'s certificate.
    pub http_tls: bool,
    /// The scheduling priority of the thread that delivers change streams.
    pub stream_priority: DeliveryPriority,
    pub store: Options,
    /// Set on a node of a Raft cluster: its Raft messages, the cluster's
    /// administration and linearizable reads go to the service put here
    /// once Raft runs (see [`ClusterService`]).
    pub cluster: Option<ClusterSlot>,
    /// Runs once the store is open and before the server is ready: what is
    /// built on the server registers its metrics here, so that no scrape
    /// sees the store without them.
    pub on_open: Option<OnOpen>,
}

/// See [`ServerConfig::on_open`]; an error stops the start.
#[derive(Clone)]
pub struct OnOpen(pub Arc<OnOpenFn>);

/// What [`OnOpen`] runs.
pub type OnOpenFn = dyn Fn(&Arc<Treelog>) -> Result<()> + Send + Sync;

impl std::fmt::Debug for OnOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnOpen")
    }
}

/// A Raft cluster's node serves the other nodes' Raft messages, the
/// cluster's administration and linearizable reads (the `treelog-raft`
/// crate implements it; the server only routes to it).
pub trait ClusterService: Send + Sync + 'static {
    /// A Raft message (see `RequestBody::Raft`); the reply's payload.
    fn raft(&self, rpc: protocol::RaftRpc, payload: Vec<u8>) -> BoxFuture<'_, Result<Vec<u8>>>;
    /// An administration request; the node's view of the cluster after it.
    fn admin(
        &self,
        req: protocol::ClusterRequest,
    ) -> BoxFuture<'_, Result<protocol::ClusterStatus>>;
    /// The sequence a linearizable read must see, applied on this node.
    fn read_index(&self) -> BoxFuture<'_, Result<u64>>;
    /// The node's role and the leader's address (for `Status`).
    fn role(&self) -> (protocol::Role, Option<String>);
    /// Whether the cluster may take `cmd` now: refused (`InvalidArgument`)
    /// while a member is at a feature level below the one it needs.
    fn admit(&self, cmd: &treelog_proto::Command) -> Result<()> {
        let _ = cmd;
        Ok(())
    }

    /// Why the node should not take traffic yet (`/readyz` answers 503
    /// with it), or `None`.
    fn not_ready(&self) -> Option<String> {
        None
    }
}

pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Where a server finds its node's [`ClusterService`] once Raft runs
/// (until then, Raft's messages are answered `Busy`).
#[derive(Clone, Default)]
pub struct ClusterSlot(Arc<OnceLock<Arc<dyn ClusterService>>>);

impl ClusterSlot {
    pub fn new() -> ClusterSlot {
        ClusterSlot::default()
    }

    /// Puts the service in place (once; later calls change nothing).
    pub fn set(&self, s: Arc<dyn ClusterService>) {
        let _ = self.0.set(s);
    }

    pub(crate) fn get(&self) -> Option<&Arc<dyn ClusterService>> {
        self.0.get()
    }
}

impl std::fmt::Debug for ClusterSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.0.get().is_some() {
            "running"
        } else {
            "not yet"
        };
        write!(f, "ClusterSlot({state})")
    }
}

impl std::fmt::Debug for ServerConfig {
    /// Every setting but the secret: the token shows as whether one is set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("data", &self.data)
            .field("listen", &self.listen)
            .field("http", &self.http)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("credentials", &self.credentials)
            .field("peer_tls_names", &self.peer_tls_names)
            .field("audit_log", &self.audit_log)
            .field("enforce_permissions", &self.enforce_permissions)
            .field("max_frame", &self.max_frame)
            .field("max_connections", &self.max_connections)
            .field("max_handshaking", &self.max_handshaking)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_subscriptions", &self.max_subscriptions)
            .field("max_conn_buffer_bytes", &self.max_conn_buffer_bytes)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("exit_on_writer_failure", &self.exit_on_writer_failure)
            .field("max_http_connections", &self.max_http_connections)
            .field("http_header_timeout", &self.http_header_timeout)
            .field("allow_insecure_listen", &self.allow_insecure_listen)
            .field("stream_priority", &self.stream_priority)
            .field("store", &self.store)
            .field("cluster", &self.cluster)
            .field("on_open", &self.on_open)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    pub fn new(data: PathBuf) -> ServerConfig {
        ServerConfig {
            data,
            listen: ([127, 0, 0, 1], 7400).into(),
            http: ([127, 0, 0, 1], 7401).into(),
            token: None,
            credentials: None,
            peer_tls_names: Vec::new(),
            audit_log: None,
            enforce_permissions: false,
            max_frame: protocol::DEFAULT_MAX_FRAME,
            max_connections: 1024,
            max_handshaking: None,
            max_in_flight: 256,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            max_subscriptions: 64,
            max_snapshot_age: Duration::from_secs(3600),
            snapshot_stall_timeout: Duration::from_secs(120),
            max_conn_buffer_bytes: DEFAULT_MAX_CONN_BUFFER_BYTES,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(10),
            exit_on_writer_failure: true,
            max_http_connections: 64,
            max_http_per_address: 16,
            http_connection_age: Duration::from_secs(300),
            http_header_timeout: Duration::from_secs(10),
            allow_insecure_listen: false,
            tls: None,
            require_tls: false,
            http_tls: false,
            stream_priority: Default::default(),
            store: Options::default(),
            cluster: None,
            on_open: None,
        }
    }

    /// The limit on connections waiting for their handshake.
    pub fn handshaking_limit(&self) -> usize {
        self.max_handshaking
            .unwrap_or(self.max_connections / 4)
            .clamp(1, self.max_connections.max(1))
    }

    /// Refuses settings that cannot work or would expose the namespace.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_MAX_FRAME..=MAX_MAX_FRAME).contains(&self.max_frame) {
            return Err(Error::InvalidArgument(format!(
                "--max-frame {}: must be between {MIN_MAX_FRAME} and {MAX_MAX_FRAME} bytes",
                self.max_frame
            )));
        }
        if self.max_conn_buffer_bytes < MIN_CONN_BUFFER_BYTES {
            return Err(Error::InvalidArgument(format!(
                "--max-conn-buffer-bytes {}: must be at least {MIN_CONN_BUFFER_BYTES}",
                self.max_conn_buffer_bytes
            )));
        }
        for (name, v) in [
            ("--max-connections", self.max_connections),
            ("--max-in-flight", self.max_in_flight),
            ("--max-http-connections", self.max_http_connections),
            ("--max-http-per-address", self.max_http_per_address),
            ("max_subscriptions", self.max_subscriptions),
            ("--max-in-flight-bytes", self.max_in_flight_bytes),
        ] {
            if v == 0 {
                return Err(Error::InvalidArgument(format!("{name} must be at least 1")));
            }
        }
        if u32::try_from(self.max_in_flight_bytes).is_err() {
            return Err(Error::InvalidArgument(format!(
                "--max-in-flight-bytes {}: must be below 4 GiB",
                self.max_in_flight_bytes
            )));
        }
        if self.max_handshaking == Some(0) {
            return Err(Error::InvalidArgument(
                "--max-handshaking must be at least 1".into(),
            ));
        }
        if self.tls.is_none() && (self.require_tls || self.http_tls) {
            let flag = if self.require_tls {
                "--require-tls"
            } else {
                "--http-tls"
            };
            return Err(Error::InvalidArgument(format!(
                "{flag} needs a certificate: give --tls-cert and --tls-key"
            )));
        }
        if self.enforce_permissions && self.credentials.is_none() {
            return Err(Error::InvalidArgument(
                "--enforce-permissions needs --credentials: without credentials every client \
                 is an admin and could name any user"
                    .into(),
            ));
        }
        if self.token.is_none()
            && self.credentials.is_none()
            && !self.listen.ip().is_loopback()
            && !self.allow_insecure_listen
        {
            return Err(Error::InvalidArgument(format!(
                "--listen {} is not a loopback address and no token is required: anyone who \
                 can reach it could read and change the namespace; give --require-token-file, \
                 or --allow-insecure-listen to serve it anyway",
                self.listen
            )));
        }
        Ok(())
    }
}

/// Smallest `--max-frame`: room for a request with two paths of the
/// longest length and a Hello.
pub const MIN_MAX_FRAME: usize = 64 << 10;
/// Largest `--max-frame` (what the Rust client accepts by default; and it
/// must fit the handshake's u32).
pub const MAX_MAX_FRAME: usize = 256 << 20;
/// Default `--max-conn-buffer-bytes`.
pub const DEFAULT_MAX_CONN_BUFFER_BYTES: usize = 8 << 20;

/// See [`ServerConfig::max_in_flight_bytes`]: a Raft node's largest frames
/// (64 MiB) one at a time, a client's requests many at once.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
/// Smallest `--max-conn-buffer-bytes`.
pub const MIN_CONN_BUFFER_BYTES: usize = 64 << 10;
/// File descriptors kept for everything but client connections: RocksDB's
/// table files (`max_open_files` = 256) plus its WAL, MANIFEST, LOG and
/// directories, the listeners, the runtime's epoll and event fds, stdio.
pub const FD_RESERVE: usize = 256 + 128;
/// Below this many RPC connections the server refuses to start rather than
/// lower `max_connections` to fit the open-file limit.
pub(crate) const MIN_FITTED_CONNECTIONS: usize = 16;

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

#[cfg(test)]
mod tests {
    use super::*;
    use treelog::ErrorKind;

    #[test]
    fn debug_leaves_the_token_out() {
        let mut c = ServerConfig::new("/d".into());
        c.token = Some("hunter2-very-secret-token-value-xyz".into());
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("<redacted>"), "{d}");
    }

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
