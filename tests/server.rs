//! End to end over real TCP: every operation, pipelining, many connections,
//! subscriptions that survive a restart, bad input, limits, token auth,
//! health endpoints, graceful shutdown under load.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use treelog::client::{Client, ClientOptions};
use treelog::protocol::{self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg};
use treelog::server::{start, ServerConfig, ServerHandle};
use treelog::stream::{StartFrom, StreamItem, SubscribeOptions};
use treelog::{admin, Command, Durability, ErrorKind};

fn config(dir: &std::path::Path) -> ServerConfig {
    let mut c = ServerConfig::new(dir.to_path_buf());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c
}

async fn client(h: &ServerHandle) -> Client {
    Client::connect(h.bound.rpc, ClientOptions::default())
        .await
        .unwrap()
}

fn mkdir(p: &str) -> Command {
    Command::Mkdir {
        path: p.into(),
        parents: true,
        mode: 0o755,
        owner: "alice".into(),
        group: "ml".into(),
    }
}

fn create(p: &str) -> Command {
    Command::Create {
        path: p.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 4096,
    }
}

async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

async fn assert_healthy(h: &ServerHandle) {
    let c = client(h).await;
    let seq = c.ping().await.unwrap();
    let got = c.submit(mkdir(&format!("/health/{seq}"))).await.unwrap();
    assert!(got > seq);
    assert_eq!(
        c.stat(&format!("/health/{seq}")).await.unwrap().name,
        seq.to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.unwrap();
    let c = client(&h).await;
    let s1 = c.submit(mkdir("/a/b")).await.unwrap();
    let s2 = c.submit(create("/a/b/f")).await.unwrap();
    assert_eq!(s2, s1 + 1);
    c.submit(Command::Complete {
        path: "/a/b/f".into(),
        size: 10,
    })
    .await
    .unwrap();
    c.submit(Command::SetSize {
        path: "/a/b/f".into(),
        size: 11,
    })
    .await
    .unwrap();
    c.submit(Command::SetAttr {
        path: "/a/b/f".into(),
        mode: Some(0o600),
        owner: Some("bob".into()),
        group: None,
        mtime_ms: Some(5),
    })
    .await
    .unwrap();
    c.submit(Command::Rename {
        src: "/a/b/f".into(),
        dst: "/a/g".into(),
        overwrite: false,
    })
    .await
    .unwrap();
    let ino = c.stat("/a/g").await.unwrap();
    assert_eq!(
        (
            ino.attrs.size,
            ino.attrs.mode,
            ino.attrs.owner.as_str(),
            ino.attrs.mtime_ms
        ),
        (11, 0o600, "bob", 5)
    );
    assert_eq!(c.stat_id(ino.id).await.unwrap(), ino);
    let page = c.list("/a", None, 1).await.unwrap();
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.next_start_after.as_deref(), Some("b"));
    let page = c.list("/a", Some("b"), 10).await.unwrap();
    assert_eq!(page.entries[0].name, "g");
    // Typed errors come back typed and keep the connection usable.
    let e = c.stat("/nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = c
        .submit(mkdir(&format!("/{}", "n".repeat(300))))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let e = c
        .submit(Command::Delete {
            path: "/a".into(),
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotEmpty);
    // Streams and cursors.
    let mut sub = c
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            cursor: Some("c1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 6 {
        if let StreamItem::Record { seq, .. } = sub.next().await.unwrap().unwrap() {
            seqs.push(seq);
        }
    }
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    c.ack("c1", 6).await.unwrap();
    assert_eq!(c.cursors().await.unwrap()[0].state.acked, 6);
    let last = c
        .submit(Command::Delete {
            path: "/a".into(),
            recursive: true,
        })
        .await
        .unwrap();
    assert_eq!(
        c.wait_for(last, Duration::from_secs(5)).await.unwrap(),
        last
    );
    drop(sub);
    c.drop_cursor("c1").await.unwrap();
    h.shutdown().await.unwrap();
    assert!(admin::verify_path(dir.path(), &Default::default())
        .unwrap()
        .ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_and_many_connections() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.unwrap();
    // One connection, 500 requests in flight at once.
    let c = client(&h).await;
    c.submit(mkdir("/p")).await.unwrap();
    let futs: Vec<_> = (0..500)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.submit(create(&format!("/p/f{i}"))).await })
        })
        .collect();
    let mut seqs = Vec::new();
    for f in futs {
        seqs.push(f.await.unwrap().unwrap());
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 500);
    // 16 connections at once.
    let tasks: Vec<_> = (0..16)
        .map(|ci| {
            let addr = h.bound.rpc;
            tokio::spawn(async move {
                let c = Client::connect(addr, ClientOptions::default())
                    .await
                    .unwrap();
                c.submit(mkdir(&format!("/m/c{ci}"))).await.unwrap();
                for i in 0..50 {
                    c.submit(create(&format!("/m/c{ci}/f{i}"))).await.unwrap();
                }
                c.list(&format!("/m/c{ci}"), None, 100)
                    .await
                    .unwrap()
                    .entries
                    .len()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 50);
    }
    assert_eq!(c.list("/p", None, 1000).await.unwrap().entries.len(), 500);
    h.shutdown().await.unwrap();
    assert!(admin::verify_path(dir.path(), &Default::default())
        .unwrap()
        .ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_survives_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.unwrap();
    let addr = h.bound.rpc;
    let c = client(&h).await;
    for i in 0..10 {
        c.submit(mkdir(&format!("/r/{i}"))).await.unwrap();
    }
    let mut sub = c
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 5 {
        if let StreamItem::Record { seq, .. } = sub.next().await.unwrap().unwrap() {
            seqs.push(seq);
        }
    }
    drop(c);
    h.shutdown().await.unwrap();
    // Same port, same data: the subscription reconnects and resumes.
    let mut cfg = config(dir.path());
    cfg.listen = addr;
    let h = start(cfg).await.unwrap();
    let c = client(&h).await;
    for i in 10..15 {
        c.submit(mkdir(&format!("/r/{i}"))).await.unwrap();
    }
    while seqs.len() < 15 {
        if let StreamItem::Record { seq, .. } = sub.next().await.unwrap().unwrap() {
            seqs.push(seq);
        }
    }
    assert_eq!(
        seqs,
        (1..=15).collect::<Vec<_>>(),
        "gap or duplicate across the restart"
    );
    assert!(sub.reconnects() >= 1);
    drop(sub);
    h.shutdown().await.unwrap();
}

async fn raw_connect(h: &ServerHandle) -> TcpStream {
    TcpStream::connect(h.bound.rpc).await.unwrap()
}

async fn expect_fatal(s: &mut TcpStream, want: ErrorKind) {
    let frame = tokio::time::timeout(Duration::from_secs(10), protocol::read_frame(s, 1 << 20))
        .await
        .expect("no reply")
        .unwrap()
        .expect("closed without an error frame");
    match protocol::decode::<ServerMsg>(&frame).unwrap() {
        ServerMsg::Fatal { kind, .. } => assert_eq!(kind, want),
        other => panic!("expected Fatal({want:?}), got {other:?}"),
    }
    // ... and then the connection is closed.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
}

/// Completes the handshake on a raw connection: Hello, then Welcome.
async fn welcome(s: &mut TcpStream) {
    s.write_all(&hello(1, None)).await.unwrap();
    let w = protocol::read_frame(s, 1 << 20).await.unwrap().unwrap();
    assert!(matches!(
        protocol::decode::<ServerMsg>(&w).unwrap(),
        ServerMsg::Welcome { .. }
    ));
}

fn hello(version: u16, token: Option<&str>) -> Vec<u8> {
    protocol::encode(&ClientMsg::Hello(Hello {
        magic: protocol::MAGIC,
        version,
        token: token.map(str::to_owned),
        client: "test".into(),
    }))
    .unwrap()
}

/// The server reads frames through a buffer: several requests in one
/// segment and one request split into single bytes are all answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_coalesced_or_split_across_segments_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let h = start(config(dir.path())).await.unwrap();
    let mut s = raw_connect(&h).await;
    s.set_nodelay(true).unwrap();
    welcome(&mut s).await;
    let req = |id: u64| {
        protocol::encode(&ClientMsg::Request {
            id,
            body: RequestBody::Stat { path: "/".into() },
        })
        .unwrap()
    };
    // Three requests in one write.
    let mut three = Vec::new();
    for id in 1..=3 {
        three.extend(req(id));
    }
    s.write_all(&three).await.unwrap();
    // A fourth, one byte at a time (TCP_NODELAY: separate segments).
    for b in req(4) {
        s.write_all(&[b]).await.unwrap();
        s.flush().await.unwrap();
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        let f = tokio::time::timeout(
            Duration::from_secs(10),
            protocol::read_frame(&mut s, 1 << 20),
        )
        .await
        .expect("a reply")
        .unwrap()
        .unwrap();
        match protocol::decode::<ServerMsg>(&f).unwrap() {
            ServerMsg::Response {
                id,
                body: ResponseBody::Inode(ino),
            } => {
                assert_eq!(ino.id, 1, "the root");
                ids.push(id);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_the_server_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_connections = 8;
    cfg.handshake_timeout = Duration::from_secs(2);
    let h = start(cfg).await.unwrap();
    let before = client(&h).await.ping().await.unwrap();

    // Random bytes (a plausible length, garbage payload).
    let mut s = raw_connect(&h).await;
    let mut junk = vec![0, 0, 0, 32];
    junk.extend((0..32u8).map(|i| i.wrapping_mul(97).wrapping_add(13)));
    s.write_all(&junk).await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;
    assert_healthy(&h).await;

    // A 4 GiB length prefix: refused before any allocation.
    let mut s = raw_connect(&h).await;
    s.write_all(&[0xFF, 0xFF, 0xFF, 0xFF]).await.unwrap();
    expect_fatal(&mut s, ErrorKind::InvalidArgument).await;
    assert_healthy(&h).await;

    // A wrong protocol version.
    let mut s = raw_connect(&h).await;
    s.write_all(&hello(99, None)).await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // A truncated frame: the length promises more than ever arrives.
    let mut s = raw_connect(&h).await;
    let f = hello(1, None);
    s.write_all(&f[..f.len() - 3]).await.unwrap();
    s.shutdown().await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // Garbage after a good handshake, on a connection that also has a
    // request in flight on another connection.
    let mut s = raw_connect(&h).await;
    welcome(&mut s).await;
    s.write_all(&[0, 0, 0, 3, 0xde, 0xad, 0xbe]).await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // A request frame that is too large for the server's limit.
    let mut s = raw_connect(&h).await;
    welcome(&mut s).await;
    let big = protocol::encode(&ClientMsg::Request {
        id: 1,
        body: RequestBody::Stat {
            path: format!("/{}", "x".repeat(2 << 20)),
        },
    })
    .unwrap();
    let _ = s.write_all(&big[..8]).await;
    expect_fatal(&mut s, ErrorKind::InvalidArgument).await;

    // A flood of connections beyond the limit: the extra ones are refused
    // with Busy, the server keeps serving.
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut s = raw_connect(&h).await;
        welcome(&mut s).await;
        held.push(s);
    }
    for _ in 0..20 {
        let mut s = raw_connect(&h).await;
        expect_fatal(&mut s, ErrorKind::Busy).await;
    }
    drop(held);
    // Slots come back once those connections close.
    let mut ok = false;
    for _ in 0..100 {
        if let Ok(c) = Client::connect(h.bound.rpc, ClientOptions::default()).await {
            c.ping().await.unwrap();
            ok = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(ok, "connection slots were not released");
    assert_healthy(&h).await;

    // Nothing was written by any of the bad connections.
    let after = client(&h).await.ping().await.unwrap();
    assert_eq!(
        after,
        before + 3,
        "only the three health-check mkdirs were written"
    );
    let (code, body) = http_get(h.bound.http, "/metrics", None).await;
    assert_eq!(code, 200);
    assert!(
        body.contains("treelog_server_rejected_frames_total"),
        "{body}"
    );
    h.shutdown().await.unwrap();
    assert!(admin::verify_path(dir.path(), &Default::default())
        .unwrap()
        .ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_and_health_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.token = Some("s3cret-token".into());
    let h = start(cfg).await.unwrap();
    // Wrong and missing tokens are refused.
    for bad in [
        None,
        Some("wrong".to_string()),
        Some("s3cret-tokeN".to_string()),
    ] {
        let e = Client::connect(
            h.bound.rpc,
            ClientOptions {
                token: bad,
                ..Default::default()
            },
        )
        .await
        .err()
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    }
    let c = Client::connect(
        h.bound.rpc,
        ClientOptions {
            token: Some("s3cret-token".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.submit(mkdir("/x")).await.unwrap();
    // Health endpoints stay open; metrics need the bearer token.
    assert_eq!(http_get(h.bound.http, "/healthz", None).await.0, 200);
    let (code, body) = http_get(h.bound.http, "/readyz", None).await;
    assert_eq!((code, body.trim()), (200, "ready"));
    assert_eq!(http_get(h.bound.http, "/metrics", None).await.0, 401);
    assert_eq!(
        http_get(h.bound.http, "/metrics", Some("nope")).await.0,
        401
    );
    let (code, body) = http_get(h.bound.http, "/metrics", Some("s3cret-token")).await;
    assert_eq!(code, 200);
    assert!(
        body.contains("treelog_server_auth_failures_total 5"),
        "{body}"
    );
    h.shutdown().await.unwrap();

    // Without a token configured, any client is accepted.
    let h = start(config(dir.path())).await.unwrap();
    let c = Client::connect(
        h.bound.rpc,
        ClientOptions {
            token: Some("whatever".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(c.stat("/x").await.is_ok());
    assert_eq!(http_get(h.bound.http, "/metrics", None).await.0, 200);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_under_load_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.store = cfg.store.durability(Durability::Sync);
    let h = start(cfg).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let addr = h.bound.rpc;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let c = Client::connect(addr, ClientOptions::default())
                .await
                .unwrap();
            c.submit(mkdir(&format!("/load/w{w}"))).await.unwrap();
            let mut acked = Vec::new();
            let mut i = 0;
            loop {
                let p = format!("/load/w{w}/f{i}");
                match c.submit(create(&p)).await {
                    Ok(_) => acked.push(p),
                    Err(_) => break, // the server went away mid-request
                }
                i += 1;
                if stop.load(Ordering::Relaxed) && i > 10_000 {
                    break;
                }
            }
            acked
        }));
    }
    // Shut down once real load has been acknowledged.
    let probe = client(&h).await;
    probe.wait_for(400, Duration::from_secs(30)).await.unwrap();
    drop(probe);
    h.shutdown().await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(
        acked.len() >= 300,
        "only {} writes acknowledged",
        acked.len()
    );
    let t = treelog::Treelog::open(dir.path(), Default::default()).unwrap();
    for p in &acked {
        t.stat(p)
            .unwrap_or_else(|e| panic!("acknowledged {p} lost: {e}"));
    }
    assert!(admin::verify(t.store()).unwrap().ok());
}
