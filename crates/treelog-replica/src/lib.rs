//! treelog's replicas (docs/REPLICATION.md): a server that serves reads and
//! change streams from a copy of another server's namespace and keeps it
//! up to date from that server's log.
//!
//! - [`bootstrap`]: on first start (no database in the data directory), a
//!   checkpoint is fetched from the source over the protocol (the backup
//!   of docs/PROTOCOL.md §13, resumable), restored beside the data
//!   directory (every file checked, the digest too) and moved into place.
//! - [`follower`]: the replica streams the source's committed log from its
//!   own `applied_seq + 1` and hands each batch to its store, which appends
//!   and applies it as the source did (`Treelog::replicate`). It reconnects
//!   after a lost connection, resuming from what it has applied.
//! - A replica that starts far behind its source (by default at least
//!   100,000 records) catches up before it serves: the records are
//!   appended to its log and applied by the replay of an open
//!   (docs/BENCHMARKS.md, Replication, has the rate).
//! - When its position is no longer in the source's log (retention removed
//!   it, or its history diverged), it fetches a fresh checkpoint while it
//!   goes on serving its old state, then stops serving, swaps the data
//!   directories and serves the new one: no read ever sees a mix of two.
//!
//! The ports are bound once: between two servers on the swapped
//! directories, new connections wait in the listen backlog.

pub mod bootstrap;
pub mod fetch;
mod follower;
pub mod metrics;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use treelog::error::{Error, ErrorKind, Result};
use treelog::replication::{NodeRole, ReplicaState};
use treelog_server::{Bound, Listeners, OnOpen, ServerConfig};

/// How to run a replica. (Its `Debug` leaves the tokens out.)
#[derive(Clone)]
pub struct ReplicaConfig {
    /// The server the replica runs (its data directory, ports, limits and
    /// store options; the store is opened as a replica).
    pub server: ServerConfig,
    /// The source's RPC address (a leader, or another replica): `host:port`
    /// or `[v6]:port`, resolved at every connect.
    pub source: String,
    /// The token the source requires, if any.
    pub source_token: Option<String>,
    /// TLS to the source (its CA, and this node's certificate for mutual
    /// TLS); `None`: plaintext.
    pub source_tls: Option<Arc<treelog_client::ClientTls>>,
    /// Most bytes of records the source sends per batch.
    pub max_batch_bytes: u32,
    /// Bytes per chunk of a checkpoint fetch.
    pub fetch_chunk: u32,
    /// The durable cursor the source keeps at this replica's position
    /// (its retention keeps what the replica needs, within its
    /// `--max-cursor-lag`); `None`: no cursor, retention may remove the
    /// replica's position, which then bootstraps again.
    pub cursor: Option<String>,
    /// Records behind the source from which the replica catches up before
    /// it serves (appending to its log and applying with the replay)
    /// rather than through its writer, one group commit per batch.
    pub catch_up_min: u64,
}

impl std::fmt::Debug for ReplicaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaConfig")
            .field("server", &self.server)
            .field("source", &self.source)
            .field(
                "source_token",
                &self.source_token.as_ref().map(|_| "<redacted>"),
            )
            .field("max_batch_bytes", &self.max_batch_bytes)
            .field("fetch_chunk", &self.fetch_chunk)
            .field("cursor", &self.cursor)
            .field("catch_up_min", &self.catch_up_min)
            .finish_non_exhaustive()
    }
}

/// `replica-<listen address>` (with the machine's host name for an
/// unspecified address such as 0.0.0.0, which every machine shares), the
/// characters a cursor name cannot hold replaced by `-`.
pub fn default_cursor(server: &ServerConfig) -> String {
    let listen = server.listen;
    let host = if listen.ip().is_unspecified() {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| listen.ip().to_string())
    } else {
        listen.ip().to_string()
    };
    let name: String = format!("{host}-{}", listen.port())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("replica-{name}")
}

impl ReplicaConfig {
    pub fn new(server: ServerConfig, source: impl ToString) -> ReplicaConfig {
        ReplicaConfig {
            cursor: Some(default_cursor(&server)),
            server,
            source: source.to_string(),
            source_token: None,
            source_tls: None,
            max_batch_bytes: 1 << 20,
            fetch_chunk: 1 << 20,
            catch_up_min: 100_000,
        }
    }

    fn client_options(&self) -> treelog_client::ClientOptions {
        treelog_client::ClientOptions {
            token: self.source_token.clone(),
            tls: self.source_tls.clone(),
            ..Default::default()
        }
    }
}

/// A running replica: `shutdown()` stops it.
pub struct ReplicaHandle {
    pub bound: Bound,
    state: Arc<ReplicaState>,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<()>>,
}

impl ReplicaHandle {
    /// What the replica knows of its source, and its counters.
    pub fn state(&self) -> &Arc<ReplicaState> {
        &self.state
    }

    /// Waits until the replica ends by itself (an error it cannot recover
    /// from: its writer stopped, or the source is of another namespace).
    pub async fn ended(&mut self) -> Result<()> {
        (&mut self.done)
            .await
            .map_err(|e| Error::Protocol(format!("replica task: {e}")))?
    }

    /// Stops following, drains the server and closes the store.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.done
            .await
            .map_err(|e| Error::Protocol(format!("replica task: {e}")))?
    }
}

/// Binds the ports and starts the replica in the current runtime: it
/// bootstraps if its data directory holds no database yet, then serves and
/// follows its source. Returns once the ports are bound (the bootstrap
/// runs after, and may take a while: until the replica serves, connections
/// to its ports wait in the listen backlog).
pub async fn start(mut cfg: ReplicaConfig) -> Result<ReplicaHandle> {
    cfg.server.validate()?;
    treelog_client::Endpoint::parse(&cfg.source)
        .map(|_| ())
        .map_err(|e| Error::InvalidArgument(format!("the replica's source: {e}")))?;
    let listeners = Listeners::bind(cfg.server.listen, cfg.server.http)?;
    let bound = listeners.bound()?;
    if cfg.server.listen.port() == 0 && cfg.cursor == Some(default_cursor(&cfg.server)) {
        cfg.server.listen = bound.rpc;
        cfg.cursor = Some(default_cursor(&cfg.server));
    }
    // A replica never creates a database: it restores its source's.
    cfg.server.store.store.create_if_missing = false;
    let state = Arc::new(ReplicaState::new(cfg.source.clone()));
    cfg.server.store.role = NodeRole::Replica(state.clone());
    let (stop, stop_rx) = watch::channel(false);
    let done = tokio::spawn(supervise(cfg, listeners, state.clone(), stop_rx));
    Ok(ReplicaHandle {
        bound,
        state,
        stop,
        done,
    })
}

/// Runs a replica until SIGINT or SIGTERM (`treelog serve --replica-of`).
pub async fn run(cfg: ReplicaConfig) -> Result<()> {
    let source = cfg.source.clone();
    let mut h = start(cfg).await?;
    let signalled = treelog_server::signal_handlers();
    tracing::info!(rpc = %h.bound.rpc, http = %h.bound.http, %source, "replica started");
    tokio::select! {
        signal = signalled => {
            tracing::info!(signal, "signal received: shutting down");
            h.shutdown().await
        }
        ended = h.ended() => ended,
    }
}

/// Waits `d`, or less if `stop` is set meanwhile; true when stopped.
async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// Bootstraps when needed, then serves and follows; serves again after each
/// re-bootstrap.
async fn supervise(
    cfg: ReplicaConfig,
    listeners: Listeners,
    state: Arc<ReplicaState>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let data = cfg.server.data.clone();
    bootstrap::recover(&data)?;
    loop {
        if !bootstrap::has_database(&data)? {
            tracing::info!(data = %data.display(), source = %cfg.source, "bootstrapping from the source");
            match bootstrap::prepare(&cfg, &state, &mut stop).await? {
                Some(_) => bootstrap::install(&data)?,
                None => return Ok(()),
            }
        }
        // Far behind: catch up before serving, at replay speed.
        match follower::catch_up(&cfg, &state, &mut stop).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Compacted => {
                tracing::warn!(
                    reason = %e,
                    "the replica's position is not in its source's log: bootstrapping again"
                );
                state.rebootstrapped();
                match bootstrap::prepare(&cfg, &state, &mut stop).await? {
                    Some(_) => bootstrap::install(&data)?,
                    None => return Ok(()),
                }
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Incompatible => return Err(e),
            // The follower tries again, from what was applied.
            Err(e) => tracing::warn!(error = %e, "catching up before serving failed"),
        }
        if *stop.borrow() {
            return Ok(());
        }
        let mut server = cfg.server.clone();
        let st = state.clone();
        server.on_open = Some(OnOpen(Arc::new(move |t| {
            if t.metrics().is_none() {
                return Ok(());
            }
            metrics::ReplicaMetrics::register(&st, t).map_err(|e| {
                Error::InvalidArgument(format!("cannot register the replica's metrics: {e}"))
            })
        })));
        let mut handle = treelog_server::start_on(server, listeners.try_clone()?).await?;
        let store = handle.store_weak();
        let end = tokio::select! {
            end = follower::follow(store, &cfg, &state, stop.clone()) => end,
            ended = handle.ended() => return ended,
        };
        match end {
            follower::FollowEnd::Stopped => return handle.shutdown().await,
            follower::FollowEnd::Fatal(e) => {
                tracing::error!(error = %e, "the replica stops");
                let _ = handle.shutdown().await;
                return Err(e);
            }
            follower::FollowEnd::Rebootstrap(why) => {
                tracing::warn!(
                    reason = %why,
                    "the replica's position is not in its source's log: bootstrapping again \
                     from a new checkpoint (the old state is served meanwhile)"
                );
                state.rebootstrapped();
                // Fetched and checked while the old state is served.
                let prepared = bootstrap::prepare(&cfg, &state, &mut stop).await;
                handle.shutdown().await?;
                match prepared? {
                    Some(_) => bootstrap::install(&data)?,
                    None => return Ok(()),
                }
            }
        }
    }
}
