//! The server's log events, captured as JSON lines: start-up with its
//! addresses and limits, refused connections (a wrong token on either
//! port, one connection too many) with the peer, the insecure-listen
//! warning, and shutdown.
//!
//! One test: the capturing subscriber is the process's global default (the
//! server logs from the runtime's worker threads), so a second test in this
//! binary would mix its events into the same capture.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use treelog::{Durability, ErrorKind};
use treelog_client::{Client, ClientOptions};
use treelog_server::{init_logging, start, LogFormat, ServerConfig};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn events(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

fn message(e: &serde_json::Value) -> &str {
    e["fields"]["message"].as_str().unwrap_or("")
}

/// The events with `msg` whose `field` is `value`.
fn find<'a>(
    events: &'a [serde_json::Value],
    msg: &str,
    field: &str,
    value: &str,
) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| message(e) == msg && e["fields"][field] == value)
        .collect()
}

fn config(dir: &std::path::Path) -> ServerConfig {
    let mut c = ServerConfig::new(dir.to_path_buf());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c
}

fn with_token(token: &str) -> ClientOptions {
    ClientOptions {
        token: Some(token.into()),
        ..Default::default()
    }
}

async fn http_status(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_logs_start_up_refusals_and_shutdown() {
    let capture = Capture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_env_filter("info")
        .with_writer(move || sink.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    // A logger is installed: installing the server's fails, without panicking.
    assert!(init_logging(LogFormat::Json).is_err());
    assert!(init_logging(LogFormat::Text).is_err());

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let mut cfg = config(&data);
    cfg.token = Some("right".into());
    cfg.max_connections = 2;
    let h = start(cfg).await.unwrap();
    let bound = h.bound;

    // Start-up: where, which format, which limits.
    let events = capture.events();
    let serving = find(&events, "serving", "rpc", &bound.rpc.to_string());
    assert_eq!(serving.len(), 1, "{events:#?}");
    let s = serving[0];
    let f = &s["fields"];
    assert_eq!(s["level"], "INFO");
    assert!(s["target"].as_str().unwrap().starts_with("treelog_server"));
    assert_eq!(f["data"], data.display().to_string(), "{s}");
    assert_eq!(f["http"], bound.http.to_string(), "{s}");
    assert_eq!(f["format_version"], treelog::format::FORMAT_VERSION, "{s}");
    assert_eq!(f["max_connections"], 2, "{s}");
    assert_eq!(f["max_frame"], h.config.max_frame, "{s}");
    assert_eq!(f["token_required"], true, "{s}");

    // A wrong token on the RPC port: refused, logged with the peer.
    let e = Client::connect(bound.rpc, with_token("wrong"))
        .await
        .err()
        .expect("a wrong token must be refused");
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    // ... and on the HTTP port.
    assert_eq!(http_status(bound.http, "/metrics", "wrong").await, 401);
    // Two clients take both slots; a third is refused as one too many.
    let a = Client::connect(bound.rpc, with_token("right"))
        .await
        .unwrap();
    let b = Client::connect(bound.rpc, with_token("right"))
        .await
        .unwrap();
    a.ping().await.unwrap();
    b.ping().await.unwrap();
    let e = Client::connect(bound.rpc, with_token("right"))
        .await
        .err()
        .expect("a third connection must be refused");
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    drop((a, b));

    let events = capture.events();
    let refused = find(
        &events,
        "refused a connection: wrong or missing token",
        "port",
        "rpc",
    );
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert_eq!(refused[0]["level"], "WARN");
    let peer: std::net::SocketAddr = refused[0]["fields"]["peer"]
        .as_str()
        .expect("a peer field")
        .parse()
        .expect("the peer is an address with its port");
    assert!(peer.ip().is_loopback(), "{peer}");
    assert_ne!(peer.port(), bound.rpc.port());
    let refused = find(
        &events,
        "refused an HTTP request: wrong or missing bearer token",
        "peer",
        "127.0.0.1",
    );
    assert_eq!(refused.len(), 1, "{events:#?}");
    let busy = find(
        &events,
        "refused a connection: too many connections",
        "port",
        "rpc",
    );
    assert_eq!(busy.len(), 1, "{events:#?}");
    assert_eq!(busy[0]["level"], "WARN");
    assert_eq!(busy[0]["fields"]["limit"], 2);
    assert!(busy[0]["fields"]["peer"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));

    // Shutdown: no new connections, drained, the store closed, in order.
    h.shutdown().await.unwrap();
    let events = capture.events();
    let at = |msg: &str| {
        events
            .iter()
            .position(|e| message(e) == msg)
            .unwrap_or_else(|| panic!("no {msg:?} in {events:#?}"))
    };
    let stopped = at("stopped accepting connections; draining");
    let drained = at("connections drained");
    let closed = at("store closed");
    assert!(stopped < drained && drained < closed, "{events:#?}");
    assert_eq!(events[drained]["fields"]["aborted"], 0);

    // A non-loopback RPC address without a token, allowed: a warning.
    let dir2 = tempfile::tempdir().unwrap();
    let mut cfg = config(dir2.path());
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    cfg.allow_insecure_listen = true;
    let h = start(cfg).await.unwrap();
    h.shutdown().await.unwrap();
    let events = capture.events();
    let insecure: Vec<_> = events
        .iter()
        .filter(|e| e["level"] == "WARN" && e["fields"]["listen"] == "0.0.0.0:0")
        .collect();
    assert_eq!(insecure.len(), 1, "{events:#?}");
    assert!(message(insecure[0]).contains("no token"), "{insecure:?}");
    // Nothing else warned or failed along the way.
    let unexpected: Vec<_> = events.iter().filter(|e| e["level"] == "ERROR").collect();
    assert!(unexpected.is_empty(), "{unexpected:#?}");
}
