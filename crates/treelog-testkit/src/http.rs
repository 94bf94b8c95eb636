//! Requests to the HTTP port (metrics, health) written by hand, so that
//! the tests see the status line and headers exactly as sent.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` with `headers` (each line ending in `\r\n`) on a connection
/// of its own: the status code (0 when there is none) and the body.
pub async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

/// `GET path`, `None` when the port does not take the connection or it
/// breaks (a server that is starting or stopping).
pub async fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok())?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_owned()))
}

/// `GET path` without extra headers.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    get_with(addr, path, "").await
}

/// The `Authorization` header line for a bearer `token`.
pub fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}
