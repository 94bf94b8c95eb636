//! The handshake: a new connection's Hello (magic, protocol version,
//! token), read within the handshake timeout and before a newer connection
//! reclaims its slot.

use std::net::SocketAddr;

use treelog::{Error, ErrorKind, Result};
use treelog_proto::protocol::{self, ClientMsg, Hello, ServerMsg};
use treelog_proto::v1;

use crate::admission::Admission;
use crate::incoming::{read_msg, ReadHalf};
use crate::out::{send, Out};
use crate::roles::Identity;
use crate::state::State;

/// Runs the handshake of the connection from `peer`, unless a newer
/// connection reclaims its slot first (`Busy`) or the server shuts down
/// (`Ok(None)`, as when the client goes away or is refused). `Ok(Some)`:
/// who the client is; it may send requests, and the connection holds its
/// slot.
pub(crate) async fn handshake(
    rd: &mut ReadHalf,
    out: &Out,
    peer: SocketAddr,
    admission: &mut Admission,
    state: &State,
) -> Result<Option<Identity>> {
    let mut shutdown = state.shutdown.clone();
    let shook = tokio::select! {
        r = read_hello(rd, out, peer, state) => r,
        _ = &mut admission.evicted => Err(evicted()),
        _ = shutdown.changed() => return Ok(None),
    };
    let shook = shook.and_then(|shook| {
        if shook.is_some() && !admission.complete() {
            return Err(evicted());
        }
        Ok(shook)
    });
    if let Err(e) = &shook {
        if let Some(suppressed) = state.refusals.handshake.check() {
            tracing::warn!(
                %peer,
                error = %e,
                suppressed,
                "closed a connection during its handshake"
            );
        }
    }
    shook
}

fn evicted() -> Error {
    Error::Busy("too many connections waiting for their handshake; this one was the oldest".into())
}

/// Reads the Hello and checks it: whose secret it holds; `Ok(None)` when
/// the client went away or was refused.
async fn read_hello(
    rd: &mut ReadHalf,
    out: &Out,
    peer: SocketAddr,
    state: &State,
) -> Result<Option<Identity>> {
    let cfg = &state.cfg;
    let hello: Hello =
        match read_msg(rd, cfg.max_frame.min(64 << 10), Some(cfg.handshake_timeout)).await? {
            Some(ClientMsg::Hello(h)) => h,
            Some(_) => return Err(Error::Protocol("the first frame must be Hello".into())),
            None => return Ok(None),
        };
    if hello.magic != protocol::MAGIC {
        return Err(Error::Protocol("bad magic in Hello".into()));
    }
    if hello.version != protocol::PROTOCOL_VERSION && hello.version != v1::VERSION {
        return Err(Error::Protocol(format!(
            "protocol version {} is not supported (this server speaks {} and {})",
            hello.version,
            v1::VERSION,
            protocol::PROTOCOL_VERSION
        )));
    }
    // From here on, frames to this client are in its version, the
    // refusal below included.
    out.set_version(hello.version);
    let who = state
        .auth
        .identify(peer.ip(), &hello.token, state.metrics())
        .await?;
    if who.is_none() {
        if let Some(suppressed) = state.refusals.unauthorized.check() {
            tracing::warn!(
                %peer,
                port = "rpc",
                suppressed,
                "refused a connection: wrong or missing token"
            );
        }
        let _ = send(
            out,
            &ServerMsg::Fatal {
                kind: ErrorKind::Unauthorized,
                message: "wrong or missing token".into(),
            },
        )
        .await;
    }
    Ok(who)
}
