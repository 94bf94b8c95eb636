//! The RPC port's listener: the sockets bound ([`Listeners`]), the
//! open-file limit the connections must fit in, the accept loop (with its
//! back-off after failures), the drain at shutdown, and the signals that
//! start it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use treelog::{Error, ErrorKind, Result};

use crate::config::{ServerConfig, FD_RESERVE, MIN_FITTED_CONNECTIONS};
use crate::connection;
use crate::out::refuse;
use crate::state::State;

/// Addresses the server bound (useful with port 0).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub rpc: SocketAddr,
    pub http: SocketAddr,
}

/// The server's two listening sockets, bound before it starts (see
/// [`start_on`]): a process that runs servers one after another on the
/// same data (a replica's re-bootstrap) keeps its ports, and the
/// connections that arrive between two of them wait in the backlog.
#[derive(Debug)]
pub struct Listeners {
    pub rpc: std::net::TcpListener,
    pub http: std::net::TcpListener,
}

impl Listeners {
    pub fn bind(rpc: SocketAddr, http: SocketAddr) -> Result<Listeners> {
        let bind = |a: SocketAddr| {
            std::net::TcpListener::bind(a).map_err(|e| {
                Error::Io(std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on {a}: {e}"),
                ))
            })
        };
        Ok(Listeners {
            http: bind(http)?,
            rpc: bind(rpc)?,
        })
    }

    /// Another handle on the same sockets.
    pub fn try_clone(&self) -> Result<Listeners> {
        Ok(Listeners {
            rpc: self.rpc.try_clone()?,
            http: self.http.try_clone()?,
        })
    }

    pub fn bound(&self) -> Result<Bound> {
        Ok(Bound {
            rpc: self.rpc.local_addr()?,
            http: self.http.local_addr()?,
        })
    }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, then makes the
/// connection limits fit in it with [`FD_RESERVE`] to spare: lowers
/// `max_connections` (loudly) or, when too few would remain, refuses.
pub(crate) fn fit_fd_limit(cfg: &mut ServerConfig) -> Result<()> {
    let Some(limit) = raise_fd_limit() else {
        return Ok(());
    };
    let fixed = cfg.max_http_connections + FD_RESERVE;
    if cfg.max_connections + fixed <= limit {
        return Ok(());
    }
    let fits = limit.saturating_sub(fixed);
    if fits < MIN_FITTED_CONNECTIONS {
        return Err(Error::InvalidArgument(format!(
            "the open-file limit (RLIMIT_NOFILE) is {limit}: too low for {} connections, {} HTTP \
             connections and {FD_RESERVE} files for RocksDB and the process; raise it (ulimit -n, \
             LimitNOFILE=) to at least {}",
            cfg.max_connections,
            cfg.max_http_connections,
            MIN_FITTED_CONNECTIONS + fixed
        )));
    }
    tracing::warn!(
        nofile = limit,
        from = cfg.max_connections,
        to = fits,
        http_connections = cfg.max_http_connections,
        reserved = FD_RESERVE,
        "the open-file limit (RLIMIT_NOFILE) is {limit}: lowering --max-connections from {} \
         to {fits} (reserving {} for HTTP and {FD_RESERVE} for RocksDB and the process); raise \
         the limit (ulimit -n, LimitNOFILE=) to serve more",
        cfg.max_connections,
        cfg.max_http_connections
    );
    cfg.max_connections = fits;
    Ok(())
}

/// The soft open-file limit after raising it as far as the hard limit
/// allows; `None` when it cannot be read (or is unlimited).
fn raise_fd_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit write and read the struct given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return None;
        }
        if r.rlim_cur < r.rlim_max {
            // An unlimited hard limit still cannot exceed the kernel's
            // per-process maximum (fs.nr_open, 1 Mi by default).
            let want = if r.rlim_max == libc::RLIM_INFINITY {
                1 << 20
            } else {
                r.rlim_max
            };
            let raised = libc::rlimit {
                rlim_cur: want.max(r.rlim_cur),
                rlim_max: r.rlim_max,
            };
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                r.rlim_cur = raised.rlim_cur;
            }
        }
        if r.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        usize::try_from(r.rlim_cur).ok()
    }
    #[cfg(not(unix))]
    None
}

/// Installs the SIGINT/SIGTERM handlers now; the future ends at the first
/// signal, with its name.
pub fn signal_handlers() -> impl std::future::Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        async move {
            match handlers {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                    "SIGINT"
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}

/// Pause after a failed `accept` (out of file descriptors, typically: the
/// pending connection stays queued, so retrying at once would spin).
/// Doubles per consecutive failure, from 10 ms up to 1 s.
pub(crate) struct AcceptBackoff {
    next: Duration,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    pub(crate) fn new() -> AcceptBackoff {
        AcceptBackoff { next: Self::FIRST }
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    /// Counts and logs the error; returns how long to wait.
    pub(crate) fn failed(&mut self, port: &str, e: &std::io::Error, state: &State) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        if let Some(m) = state.metrics() {
            m.accept_errors.with_label_values(&[port]).inc();
        }
        // One event per failure: at most ~1 a second once the backoff is up.
        tracing::warn!(
            port,
            error = %e,
            retry_ms = wait.as_millis() as u64,
            "accept failed; retrying"
        );
        wait
    }
}

/// Serves the RPC port until the shutdown signal, then drains it, waits for
/// the HTTP port (`http`) to end, and closes the store.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    http: tokio::task::JoinHandle<()>,
) -> Result<()> {
    let mut conns = JoinSet::new();
    let writer_failure = accept_until_stopped(listener, &state, &mut conns).await;
    // Every task that holds the store ends before it is closed: the
    // connections (`drain` waits for the aborted ones too), and the HTTP
    // port (which stops on the same signal). Otherwise the close below
    // could find the store still shared, and the database would stay open
    // (and locked) after `shutdown` returned.
    drain(&mut conns, &state).await;
    let _ = http.await;
    close_store(state).await?;
    match writer_failure {
        Some(why) => Err(Error::WriterStopped(why)),
        None => Ok(()),
    }
}

/// Accepts connections into `conns` until the shutdown signal or the
/// writer's failure (returned: the server then ends with it), and closes
/// the listener.
async fn accept_until_stopped(
    listener: TcpListener,
    state: &Arc<State>,
    conns: &mut JoinSet<()>,
) -> Option<String> {
    let mut shutdown = state.shutdown.clone();
    let mut backoff = AcceptBackoff::new();
    // How often the loop looks at the writer (a stopped writer is rare;
    // ending within a second of it is soon enough).
    let mut writer_check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shutdown.changed() => return None,
            _ = writer_check.tick(), if state.cfg.exit_on_writer_failure => {
                if let Some(why) = writer_stopped(state) {
                    return Some(why);
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((sock, peer)) => {
                    backoff.reset();
                    take(sock, peer, state, conns);
                }
                Err(e) => {
                    let wait = backoff.failed("rpc", &e, state);
                    tokio::select! {
                        _ = shutdown.changed() => return None,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// The writer's failure, if it stopped; then stops both ports too.
fn writer_stopped(state: &State) -> Option<String> {
    let why = state.store.get().and_then(|t| t.writer_failure())?;
    tracing::error!(
        reason = %why,
        "the writer stopped: draining and ending the server, to be restarted \
         (the restart replays the log)"
    );
    // The HTTP port stops on the same signal.
    let _ = state.stop.send(true);
    Some(why)
}

/// Serves an accepted connection in `conns` if it gets a slot, else
/// refuses it (`Busy`).
fn take(sock: TcpStream, peer: SocketAddr, state: &Arc<State>, conns: &mut JoinSet<()>) {
    if let Some(m) = state.metrics() {
        m.connections_total.inc();
    }
    match state.slots.admit(state.metrics()) {
        Some(admission) => {
            let st = state.clone();
            conns.spawn(async move {
                if let Some(m) = st.metrics() {
                    m.connections.inc();
                }
                let _ = connection::serve(sock, peer, admission, st.clone()).await;
                if let Some(m) = st.metrics() {
                    m.connections.dec();
                }
            });
        }
        None => {
            if let Some(m) = state.metrics() {
                m.connections_rejected.inc();
            }
            if let Some(suppressed) = state.refusals.busy.check() {
                tracing::warn!(
                    %peer,
                    port = "rpc",
                    limit = state.cfg.max_connections,
                    suppressed,
                    "refused a connection: too many connections"
                );
            }
            conns.spawn(async move {
                let _ = refuse(sock, ErrorKind::Busy, "too many connections").await;
            });
        }
    }
}

/// Lets the connections finish their in-flight requests, for at most the
/// grace period; then aborts the rest and waits until they are gone.
async fn drain(conns: &mut JoinSet<()>, state: &State) {
    let grace = state.cfg.shutdown_grace;
    tracing::info!(
        connections = conns.len(),
        grace_ms = grace.as_millis() as u64,
        "stopped accepting connections; draining"
    );
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    tracing::info!(aborted = conns.len(), "connections drained");
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

/// Closes the store, once nothing else holds it.
async fn close_store(state: Arc<State>) -> Result<()> {
    let Some(t) = state.store.get() else {
        return Ok(());
    };
    state.ready.store(false, Ordering::Release);
    let t = t.clone();
    drop(state);
    // Close when this is the last reference (connections are gone).
    tokio::task::spawn_blocking(move || match Arc::try_unwrap(t) {
        Ok(t) => t.close(),
        Err(t) => {
            tracing::warn!(
                holders = Arc::strong_count(&t) - 1,
                "the store is still referenced at shutdown: flushed, closed when released"
            );
            t.store().flush()
        }
    })
    .await
    .map_err(|e| Error::Protocol(format!("close task: {e}")))??;
    tracing::info!("store closed");
    Ok(())
}
