//! TLS on the server's ports: which protocol a new RPC connection speaks
//! (its first byte: see docs/PROTOCOL.md), its TLS handshake within the
//! handshake timeout and while it holds its admission slot, the identity
//! its client certificate names; and the certificate's reloading (when
//! its files change, and on SIGHUP).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;
use treelog::ErrorKind;
use treelog_tls::{peer_identity, ServerTls, TLS_HANDSHAKE_BYTE};

use crate::admission::Admission;
use crate::out::refuse;
use crate::state::State;
use crate::stream::Stream;

/// How often the certificate's files are looked at.
pub(crate) const RELOAD_POLL: Duration = Duration::from_secs(5);

/// A connection ready for its Hello, and the TLS identity of its client.
pub(crate) struct Opened {
    pub(crate) stream: Stream,
    pub(crate) tls_identity: Option<String>,
}

/// Opens the connection from `peer`: plaintext on a server without TLS;
/// otherwise by its first byte, TLS (handshake done) or plaintext (refused
/// with `--require-tls`). `None`: the connection is over (closed, refused,
/// failed, evicted for a newer one, or the server stops).
pub(crate) async fn open(
    sock: TcpStream,
    peer: SocketAddr,
    admission: &mut Admission,
    state: &State,
) -> Option<Opened> {
    let Some(tls) = &state.cfg.tls else {
        return Some(Opened {
            stream: Stream::Plain(sock),
            tls_identity: None,
        });
    };
    let limit = state.cfg.handshake_timeout;
    let mut shutdown = state.shutdown.clone();
    let opened = tokio::select! {
        r = tokio::time::timeout(limit, by_first_byte(sock, tls, state)) => match r {
            Ok(r) => r,
            Err(_) => Err(format!("no TLS handshake within {} s", limit.as_secs())),
        },
        _ = &mut admission.evicted => Err(
            "too many connections waiting for their handshake; this one was the oldest".into()
        ),
        _ = shutdown.changed() => return None,
    };
    match opened {
        Ok(o) => o,
        Err(why) => {
            if let Some(suppressed) = state.refusals.handshake.check() {
                tracing::warn!(
                    %peer,
                    error = %why,
                    suppressed,
                    "closed a connection before or during its TLS handshake"
                );
            }
            None
        }
    }
}

fn count(state: &State, outcome: &str) {
    if let Some(m) = state.metrics() {
        m.tls_handshakes.with_label_values(&[outcome]).inc();
    }
}

/// The connection's protocol by its first byte; the TLS handshake when it
/// is TLS (counted). `Ok(None)`: closed before a byte, or plaintext
/// refused.
async fn by_first_byte(
    sock: TcpStream,
    tls: &ServerTls,
    state: &State,
) -> Result<Option<Opened>, String> {
    let mut first = [0u8; 1];
    match sock.peek(&mut first).await {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.to_string()),
    }
    if first[0] != TLS_HANDSHAKE_BYTE {
        if state.cfg.require_tls {
            refuse_plaintext(sock, state).await;
            return Ok(None);
        }
        return Ok(Some(Opened {
            stream: Stream::Plain(sock),
            tls_identity: None,
        }));
    }
    let s = match tls.accept(sock).await {
        Ok(s) => s,
        Err(e) => {
            count(state, "failed");
            return Err(format!("TLS handshake failed: {e}"));
        }
    };
    count(state, "ok");
    let tls_identity = peer_identity(&s);
    Ok(Some(Opened {
        stream: Stream::Tls(Box::new(s)),
        tls_identity,
    }))
}

/// Tells a plaintext client of a `--require-tls` server why it is closed
/// (in a frame it can read), and logs it.
async fn refuse_plaintext(sock: TcpStream, state: &State) {
    if let Some(m) = state.metrics() {
        m.plaintext_refused.inc();
    }
    if let Some(suppressed) = state.refusals.handshake.check() {
        let peer = sock.peer_addr().ok();
        tracing::warn!(
            peer = ?peer,
            port = "rpc",
            suppressed,
            "refused a plaintext connection: this server requires TLS (--require-tls)"
        );
    }
    let _ = refuse(
        sock,
        ErrorKind::Unauthorized,
        "this server requires TLS: connect with TLS (--tls-ca)",
    )
    .await;
}

/// Reloads `tls` when its files change (looked at every [`RELOAD_POLL`])
/// and on SIGHUP, until the server stops. A failed reload keeps the
/// certificate in force (`ServerTls::reload` logs why). The SIGHUP handler
/// is in place when this returns (a SIGHUP before it would end the
/// process).
pub(crate) fn spawn_reloader(tls: ServerTls, shutdown: watch::Receiver<bool>) {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    #[cfg(not(unix))]
    let hup = None::<()>;
    tokio::spawn(reload_until_stopped(tls, shutdown, hup));
}

#[cfg(unix)]
type Hangup = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Hangup = ();

async fn reload_until_stopped(
    tls: ServerTls,
    mut shutdown: watch::Receiver<bool>,
    mut hup: Option<Hangup>,
) {
    let mut poll = tokio::time::interval(RELOAD_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hangup = async {
            match hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = {
            let _ = &mut hup;
            std::future::pending::<Option<()>>()
        };
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = poll.tick() => {
                let _ = tls.reload_if_changed();
            }
            _ = hangup => {
                tracing::info!("SIGHUP: reloading the TLS certificate");
                let _ = tls.reload();
            }
        }
    }
}
