//! The RPC port byte by byte: handshakes and frames written by hand, for
//! what a well-behaved `Client` never sends, and the server's replies
//! read one frame at a time.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use treelog_proto::protocol::{self, ClientMsg, Hello, RequestBody, ServerMsg};
use treelog_proto::ErrorKind;

/// The frame of a `Hello` with `version` and `token`.
pub fn hello(version: u16, token: Option<&str>) -> Vec<u8> {
    protocol::encode(&ClientMsg::Hello(Hello {
        magic: protocol::MAGIC,
        version,
        token: token.map(str::to_owned),
        client: "test".into(),
    }))
    .unwrap()
}

/// The frame of request `id`.
pub fn request(id: u64, body: RequestBody) -> Vec<u8> {
    protocol::encode(&ClientMsg::Request { id, body }).unwrap()
}

/// The frames of the same request under each of `ids`, one after the
/// other (to be written at once).
pub fn requests(ids: impl IntoIterator<Item = u64>, body: &RequestBody) -> Vec<u8> {
    ids.into_iter()
        .flat_map(|id| request(id, body.clone()))
        .collect()
}

/// The next message from the server, of at most `max_frame` bytes; panics
/// when none arrives within `guard` (a failure guard, not a timing
/// assertion) or the connection closes first.
pub async fn recv(s: &mut TcpStream, max_frame: usize, guard: Duration) -> ServerMsg {
    let frame = tokio::time::timeout(guard, protocol::read_frame(s, max_frame))
        .await
        .unwrap_or_else(|_| panic!("no message from the server within {guard:?}"))
        .expect("read a frame")
        .expect("the server closed the connection without a message");
    protocol::decode(&frame).expect("decode the server's message")
}

/// The next message, which must be `Fatal`: its kind and message.
pub async fn recv_fatal(s: &mut TcpStream, guard: Duration) -> (ErrorKind, String) {
    match recv(s, 1 << 20, guard).await {
        ServerMsg::Fatal { kind, message } => (kind, message),
        other => panic!("expected Fatal, got {other:?}"),
    }
}

/// Completes the handshake on a raw connection: Hello (this protocol
/// version, no token), then Welcome.
pub async fn handshake(s: &mut TcpStream) {
    s.write_all(&hello(protocol::PROTOCOL_VERSION, None))
        .await
        .unwrap();
    let reply = recv(s, 1 << 20, Duration::from_secs(30)).await;
    assert!(
        matches!(reply, ServerMsg::Welcome { .. }),
        "expected Welcome, got {reply:?}"
    );
}
