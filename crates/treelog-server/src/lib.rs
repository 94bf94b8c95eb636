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
//!
//! The modules, from the bottom up (each uses only modules listed before
//! it): `sched` (thread scheduling classes), `streams::delivery` (the
//! delivery runtime), `config` (settings and limits), `logging`, `metrics`
//! (the server's series, on the store's registry), `backups` (backups
//! fetched over the RPC port), `auth` (the token and its throttle),
//! `roles` (what each role grants, and the power each request needs),
//! `credentials` (the credentials file), `audit` (the audit log),
//! `admission` (connection slots and the handshake share), `state` (what
//! the ports and connections share), `stream` (a connection's bytes,
//! plaintext or TLS), `out` and `incoming` (a connection's frames), `tls`
//! (TLS on the ports: the first byte, the handshake, reloads), `context` (what a connection's requests share), `reads`,
//! `streams` (subscriptions), `replication` (the replication source),
//! `dispatch` (request routing), `handshake`, `connection` (one RPC
//! connection), `listen` (the RPC port: listeners, accept loop, drain,
//! signals), `http` (the HTTP port), and `server` (start, run, the handle).

mod admission;
mod answers;
mod audit;
mod auth;
mod backups;
mod config;
mod connection;
mod context;
mod credentials;
mod dispatch;
mod handshake;
mod http;
mod incoming;
mod listen;
mod logging;
mod metrics;
mod out;
mod reads;
mod replication;
mod roles;
mod sched;
mod server;
mod state;
mod stream;
mod streams;
mod tls;

pub use audit::AuditTarget;
pub use config::{
    request_runtime, BoxFuture, ClusterService, ClusterSlot, OnOpen, OnOpenFn, ServerConfig,
    WorkerPolicy, DEFAULT_MAX_CONN_BUFFER_BYTES, DEFAULT_MAX_IN_FLIGHT_BYTES, FD_RESERVE,
    MAX_MAX_FRAME, MIN_CONN_BUFFER_BYTES, MIN_MAX_FRAME,
};
pub use credentials::{
    add_credential, check_secret_len, generate_secret, hash_secret, MIN_SECRET_LEN,
};
pub use listen::{signal_handlers, Bound, Listeners};
pub use logging::{init_logging, LogFormat};
pub use metrics::ServerMetrics;
pub use roles::Role;
pub use server::{run, start, start_on, ServerHandle};
pub use streams::{DeliveryPriority, DeliveryRuntime};
