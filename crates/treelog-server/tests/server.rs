//! End to end over real TCP: every operation, pipelining, many connections,
//! subscriptions that survive a restart, bad input, limits, token auth,
//! health endpoints, graceful shutdown under load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use server::{client, config, server_metrics};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use treelog::stream::{StartFrom, SubscribeOptions};
use treelog::{admin, Command, Durability, ErrorKind};
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{RequestBody, ResponseBody, ServerMsg};
use treelog_server::{start, ServerHandle};
use treelog_testkit::client::{connect, next_records};
use treelog_testkit::commands::{create, mkdir_as};
use treelog_testkit::{http, poll, wire};

mod support;
use support::server;

fn mkdir(p: &str) -> Command {
    mkdir_as(p, "alice", "ml")
}

fn with_token(token: Option<&str>) -> ClientOptions {
    ClientOptions {
        token: token.map(str::to_owned),
        ..Default::default()
    }
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
    let h = server::start(dir.path(), |_| {}).await;
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
    assert_eq!(page.next_start_after.as_deref(), Some("b".into()));
    let page = c.list("/a", Some("b".into()), 10).await.unwrap();
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
    assert_eq!(next_records(&mut sub, 6).await, (1..=6).collect::<Vec<_>>());
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
    let h = server::start(dir.path(), |_| {}).await;
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
                let c = connect(addr).await;
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
    let h = server::start(dir.path(), |_| {}).await;
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
    let mut seqs = next_records(&mut sub, 5).await;
    drop(c);
    h.shutdown().await.unwrap();
    // Same port, same data: the subscription reconnects and resumes.
    let h = server::start(dir.path(), |c| c.listen = addr).await;
    let c = client(&h).await;
    for i in 10..15 {
        c.submit(mkdir(&format!("/r/{i}"))).await.unwrap();
    }
    seqs.extend(next_records(&mut sub, 10).await);
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

/// The server answers `s` with `Fatal(want)` and closes it.
async fn expect_fatal(s: &mut TcpStream, want: ErrorKind) {
    let (kind, message) = wire::recv_fatal(s, Duration::from_secs(10)).await;
    assert_eq!(kind, want, "{message}");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
}

/// The server reads frames through a buffer: several requests in one
/// segment and one request split into single bytes are all answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_coalesced_or_split_across_segments_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let mut s = raw_connect(&h).await;
    s.set_nodelay(true).unwrap();
    wire::handshake(&mut s).await;
    let stat = RequestBody::Stat { path: "/".into() };
    // Three requests in one write.
    s.write_all(&wire::requests(1..=3, &stat)).await.unwrap();
    // A fourth, one byte at a time (TCP_NODELAY: separate segments).
    for b in wire::request(4, stat) {
        s.write_all(&[b]).await.unwrap();
        s.flush().await.unwrap();
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        match wire::recv(&mut s, 1 << 20, Duration::from_secs(10)).await {
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

/// `stat_many` sends a batch in one write and gets each path its own
/// answer, in order, errors included, read-your-writes; a batch larger
/// than the server's read batches and in-flight window is answered whole;
/// a batch on a connection the server has closed fails instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_many_answers_each_path_of_a_pipelined_batch() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = client(&h).await;
    c.submit(mkdir("/p")).await.unwrap();
    for i in 0..300 {
        c.submit(create(&format!("/p/f{i}"))).await.unwrap();
    }
    let paths: Vec<String> = (0..1_000)
        .map(|i| match i % 4 {
            3 => format!("/p/missing{i}"),
            _ => format!("/p/f{}", (i * 7) % 300),
        })
        .collect();
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let got = c.stat_many(&refs).await.unwrap();
    assert_eq!(got.len(), paths.len());
    for (p, r) in paths.iter().zip(&got) {
        match r {
            Ok(ino) => assert_eq!(format!("/p/{}", ino.name), *p),
            Err(e) => {
                assert!(p.contains("missing"), "{p}: {e}");
                assert_eq!(e.kind(), ErrorKind::NotFound);
            }
        }
    }
    assert_eq!(got.iter().filter(|r| r.is_err()).count(), 250);
    // A write, then a batch: the batch reads at least that state.
    c.submit(create("/p/new")).await.unwrap();
    let got = c.stat_many(&["/p/new", "/p/f0"]).await.unwrap();
    assert!(got.iter().all(|r| r.is_ok()));
    assert!(c.stat_many(&[]).await.unwrap().is_empty());
    h.shutdown().await.unwrap();
    let after = tokio::time::timeout(Duration::from_secs(30), c.stat_many(&refs[..10]))
        .await
        .expect("a batch on a closed connection does not hang");
    match after {
        Err(_) => {}
        Ok(rs) => assert!(rs.iter().all(|r| r.is_err()), "{rs:?}"),
    }
}

/// Reads in a pipelined burst are answered in batches (several reads to a
/// task) and the other requests between them on their own: every request
/// of a burst that mixes them gets exactly its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_mixing_reads_and_writes_gets_every_answer_once() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let mut s = raw_connect(&h).await;
    s.set_nodelay(true).unwrap();
    wire::handshake(&mut s).await;
    // What each id asks, in the order written (all in one write).
    let mut asked: Vec<(u64, RequestBody)> = Vec::new();
    for id in 1..=100u64 {
        let body = match id % 10 {
            // A write inside a run of reads ends the batch being gathered.
            3 => RequestBody::Mutate(mkdir(&format!("/m{id}"))),
            5 => RequestBody::Stat {
                path: "/nope".into(),
            },
            7 => RequestBody::List {
                path: "/".into(),
                start_after: None,
                limit: 1000,
            },
            8 => RequestBody::StatId { id: 1 },
            9 => RequestBody::Ping,
            _ => RequestBody::Stat { path: "/".into() },
        };
        asked.push((id, body));
    }
    let burst: Vec<u8> = asked
        .iter()
        .flat_map(|(id, b)| wire::request(*id, b.clone()))
        .collect();
    s.write_all(&burst).await.unwrap();
    let mut answered = std::collections::BTreeMap::new();
    for _ in 0..asked.len() {
        match wire::recv(&mut s, 1 << 20, Duration::from_secs(30)).await {
            ServerMsg::Response { id, body } => {
                assert!(
                    answered.insert(id, body).is_none(),
                    "request {id} answered twice"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for (id, body) in &asked {
        let got = &answered[id];
        match (body, got) {
            (RequestBody::Mutate(_), ResponseBody::Seq(_))
            | (RequestBody::Ping, ResponseBody::Seq(_)) => {}
            (RequestBody::Stat { path }, ResponseBody::Error { kind, .. }) if path == "/nope" => {
                assert_eq!(*kind, ErrorKind::NotFound)
            }
            (RequestBody::Stat { .. } | RequestBody::StatId { .. }, ResponseBody::Inode(ino)) => {
                assert_eq!(ino.id, 1, "request {id}: the root")
            }
            (RequestBody::List { .. }, ResponseBody::Page(p)) => {
                // The mkdirs written before it in the burst may or may
                // not have committed when it ran; each entry is one of them.
                assert!(p.entries.iter().all(|e| e.name.starts_with(b"m")), "{p:?}")
            }
            (b, g) => panic!("request {id}: {b:?} answered with {g:?}"),
        }
    }
    // Every mkdir was applied.
    let c = client(&h).await;
    let page = c.list("/", None, 1000).await.unwrap();
    assert_eq!(page.entries.len(), 10);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_the_server_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| {
        c.max_connections = 8;
        c.handshake_timeout = Duration::from_secs(2);
    })
    .await;
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
    s.write_all(&wire::hello(99, None)).await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // A truncated frame: the length promises more than ever arrives.
    let mut s = raw_connect(&h).await;
    let f = wire::hello(1, None);
    s.write_all(&f[..f.len() - 3]).await.unwrap();
    s.shutdown().await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // Garbage after a good handshake, on a connection that also has a
    // request in flight on another connection.
    let mut s = raw_connect(&h).await;
    wire::handshake(&mut s).await;
    s.write_all(&[0, 0, 0, 3, 0xde, 0xad, 0xbe]).await.unwrap();
    expect_fatal(&mut s, ErrorKind::Protocol).await;

    // A request frame that is too large for the server's limit.
    let mut s = raw_connect(&h).await;
    wire::handshake(&mut s).await;
    let big = wire::request(
        1,
        RequestBody::Stat {
            path: format!("/{}", "x".repeat(2 << 20)).into(),
        },
    );
    let _ = s.write_all(&big[..8]).await;
    expect_fatal(&mut s, ErrorKind::InvalidArgument).await;

    // A flood of connections beyond the limit: the extra ones are refused
    // with Busy, the server keeps serving.
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut s = raw_connect(&h).await;
        wire::handshake(&mut s).await;
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
    let (code, body) = http::get(h.bound.http, "/metrics").await;
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
    let h = server::start(dir.path(), |c| c.token = Some("s3cret-token".into())).await;
    // Wrong and missing tokens are refused.
    for bad in [None, Some("wrong"), Some("s3cret-tokeN")] {
        let e = Client::connect(h.bound.rpc, with_token(bad))
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    }
    let c = Client::connect(h.bound.rpc, with_token(Some("s3cret-token")))
        .await
        .unwrap();
    c.submit(mkdir("/x")).await.unwrap();
    // Health endpoints stay open; metrics need the bearer token.
    assert_eq!(http::get(h.bound.http, "/healthz").await.0, 200);
    let (code, body) = http::get(h.bound.http, "/readyz").await;
    assert_eq!((code, body.trim()), (200, "ready"));
    assert_eq!(http::get(h.bound.http, "/metrics").await.0, 401);
    let nope = http::bearer("nope");
    assert_eq!(http::get_with(h.bound.http, "/metrics", &nope).await.0, 401);
    let right = http::bearer("s3cret-token");
    let (code, body) = http::get_with(h.bound.http, "/metrics", &right).await;
    assert_eq!(code, 200);
    assert!(
        body.contains("treelog_server_auth_failures_total 5"),
        "{body}"
    );
    h.shutdown().await.unwrap();

    // Without a token configured, any client is accepted.
    let h = server::start(dir.path(), |_| {}).await;
    let c = Client::connect(h.bound.rpc, with_token(Some("whatever")))
        .await
        .unwrap();
    assert!(c.stat("/x").await.is_ok());
    assert_eq!(http::get(h.bound.http, "/metrics").await.0, 200);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_under_load_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| c.store.writer.durability = Durability::Sync).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let addr = h.bound.rpc;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let c = connect(addr).await;
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

/// Connections that never say Hello take at most a share of the slots,
/// and a newer connection reclaims the oldest one's: they cannot lock
/// clients out (they took every slot for the handshake timeout before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_handshake_cannot_lock_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| {
        c.max_connections = 8;
        // Long enough that the handshake timeout frees nothing here.
        c.handshake_timeout = Duration::from_secs(600);
    })
    .await;
    assert_eq!(h.config.handshaking_limit(), 2);
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(client(&h).await);
    }
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(raw_connect(&h).await);
    }
    // Two more clients get in, each reclaiming a silent connection's slot.
    for _ in 0..2 {
        let c = tokio::time::timeout(
            Duration::from_secs(30),
            Client::connect(h.bound.rpc, ClientOptions::default()),
        )
        .await
        .expect("failure guard")
        .expect("a client was locked out by connections that never said Hello");
        c.ping().await.unwrap();
        clients.push(c);
    }
    // Every slot now belongs to a handshaken client: the next is refused.
    let e = Client::connect(h.bound.rpc, ClientOptions::default())
        .await
        .err()
        .expect("a ninth connection");
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    // The silent connections were closed with Busy, oldest first.
    for s in silent.iter_mut() {
        expect_fatal(s, ErrorKind::Busy).await;
    }
    for c in &clients {
        c.ping().await.unwrap();
    }
    assert_eq!(server_metrics(&h).handshake_evictions.get(), 20);
    assert_eq!(server_metrics(&h).handshaking.get(), 0);
    drop(clients);
    h.shutdown().await.unwrap();
}

/// Wrong tokens from one address are answered ever more slowly: 50 ms
/// after the first failure, doubling (a lower bound on time, which a
/// loaded machine only lengthens). The right token still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failed_authentications_are_slowed_down() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| c.token = Some("right".into())).await;
    let opts = |t| with_token(Some(t));
    let t0 = std::time::Instant::now();
    for _ in 0..6 {
        let e = Client::connect(h.bound.rpc, opts("wrong"))
            .await
            .err()
            .expect("refused");
        assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    }
    let took = t0.elapsed();
    // Waits before the 2nd..6th checks: 50 + 100 + 200 + 400 + 800 ms.
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    let c = Client::connect(h.bound.rpc, opts("right")).await.unwrap();
    c.ping().await.unwrap();
    assert_eq!(server_metrics(&h).auth_failures.get(), 6);
    // Success forgot the failures: a wrong token is answered at once again
    // (no lower bound to check; the count shows it was checked).
    assert!(Client::connect(h.bound.rpc, opts("wrong")).await.is_err());
    assert_eq!(server_metrics(&h).auth_failures.get(), 7);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| c.token = Some("tok".into())).await;
    for header in [
        "Authorization: Bearer tok\r\n",
        "authorization: bearer tok\r\n",
        "AUTHORIZATION: BEARER tok\r\n",
        "Authorization: bEaReR   tok\r\n",
    ] {
        assert_eq!(
            http::get_with(h.bound.http, "/metrics", header).await.0,
            200,
            "{header}"
        );
    }
    for header in [
        "Authorization: Basic tok\r\n",
        "Authorization: Bearertok\r\n",
        "Authorization: tok\r\n",
    ] {
        assert_eq!(
            http::get_with(h.bound.http, "/metrics", header).await.0,
            401,
            "{header}"
        );
    }
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_and_an_open_listen_address_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for max_frame in [
        0,
        1000,
        treelog_server::MIN_MAX_FRAME - 1,
        treelog_server::MAX_MAX_FRAME + 1,
        u32::MAX as usize + 1,
    ] {
        let mut cfg = config(dir.path());
        cfg.max_frame = max_frame;
        let e = start(cfg).await.err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("--max-frame"), "{e}");
    }
    let mut cfg = config(dir.path());
    cfg.max_conn_buffer_bytes = 0;
    assert_eq!(
        start(cfg).await.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
    // Not loopback, no token: refused unless asked for.
    let mut cfg = config(dir.path());
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    let e = start(cfg.clone()).await.err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("--allow-insecure-listen"), "{e}");
    cfg.allow_insecure_listen = true;
    start(cfg.clone()).await.unwrap().shutdown().await.unwrap();
    cfg.allow_insecure_listen = false;
    cfg.token = Some("t".into());
    let h = start(cfg).await.unwrap();
    // The limits at their bounds work.
    h.shutdown().await.unwrap();
    let h = server::start(dir.path(), |c| c.max_frame = treelog_server::MAX_MAX_FRAME).await;
    assert_healthy(&h).await;
    h.shutdown().await.unwrap();
}

/// A reply larger than the client's `max_frame` is a `Protocol` error that
/// names the size and the limit: from a call, and as the end of a
/// subscription (which used to reconnect and meet it again forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_too_large_for_the_client_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = client(&h).await;
    c.submit(mkdir("/d")).await.unwrap();
    for i in 0..40 {
        c.submit(create(&format!("/d/{i:03}{}", "n".repeat(200))))
            .await
            .unwrap();
    }
    let small = ClientOptions {
        max_frame: 4096,
        ..Default::default()
    };
    let sc = Client::connect(h.bound.rpc, small.clone()).await.unwrap();
    let e = sc.list("/d", None, 1000).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("exceeds the limit of 4096"), "{e}");
    // The recursive delete's record (41 events) is above 4096 bytes.
    c.submit(Command::Delete {
        path: "/d".into(),
        recursive: true,
    })
    .await
    .unwrap();
    let sc = Client::connect(h.bound.rpc, small).await.unwrap();
    let mut sub = sc
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match sub.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return e,
                None => panic!("the subscription ended without an error"),
            }
        }
    })
    .await
    .expect("no error: the subscription kept reconnecting");
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("exceeds the limit of 4096"), "{e}");
    assert_eq!(sub.reconnects(), 0);
    assert!(sub.next().await.is_none(), "the subscription ended");
    h.shutdown().await.unwrap();
}

/// The HTTP port holds at most `max_http_connections`, answers more with
/// 503, and closes connections that do not send their headers in time
/// (silent ones, and one that drips a header line at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_are_capped_and_must_send_headers_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| {
        c.max_http_connections = 4;
        c.http_header_timeout = Duration::from_secs(1);
    })
    .await;
    let (peak, sampler) = poll::peak({
        let m = server_metrics(&h);
        move || m.http_connections.get()
    });
    // The dripping connection first, so that it gets a slot.
    let drip = TcpStream::connect(h.bound.http).await.unwrap();
    let (mut drip_rd, mut drip_wr) = drip.into_split();
    let mut silent = Vec::new();
    for _ in 0..12 {
        silent.push(TcpStream::connect(h.bound.http).await.unwrap());
    }
    let dripper = tokio::spawn(async move {
        if drip_wr
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if drip_wr.write_all(b"X-Slow: 1\r\n").await.is_err() {
                return;
            }
        }
    });
    let mut refused = 0;
    for s in silent.iter_mut() {
        let text = read_until_closed(s, "an HTTP connection that sent nothing").await;
        if text.starts_with("HTTP/1.1 503") {
            refused += 1;
        }
    }
    read_until_closed(&mut drip_rd, "a connection dripping its headers").await;
    dripper.abort();
    sampler.abort();
    assert!(peak.load(Ordering::Relaxed) <= 4, "{peak:?}");
    assert!(
        refused <= server_metrics(&h).http_rejected.get(),
        "{refused}"
    );
    assert_eq!(http::get(h.bound.http, "/healthz").await.0, 200);
    // An idle keep-alive connection is closed too, after its response.
    let mut s = TcpStream::connect(h.bound.http).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let text = read_until_closed(&mut s, "an idle keep-alive connection").await;
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n"),
        "{text}"
    );
    h.shutdown().await.unwrap();
}

/// What the server sent on `r` until it closed it (a read error ends it
/// too); panics when `what` was not closed within 30 s.
async fn read_until_closed(r: &mut (impl AsyncRead + Unpin), what: &str) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), r.read_to_end(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("{what} was never closed"));
    String::from_utf8_lossy(&buf).into_owned()
}

/// `shutdown` returns only once the store is closed: the HTTP port (which
/// stops on the same signal, concurrently), an HTTP connection kept alive
/// across the signal, and an RPC client that never disconnects do not keep
/// the database open (and locked) behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_with_the_store_closed_despite_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    for round in 0..20 {
        let h = server::start(&data, |_| {}).await;
        if round % 2 == 0 {
            // Nothing connected: the HTTP port's task alone races the close.
            h.shutdown().await.unwrap();
            let t = treelog::Treelog::open(&data, treelog::Options::default())
                .unwrap_or_else(|e| panic!("round {round}: reopen after shutdown: {e}"));
            t.close().unwrap();
            continue;
        }
        let c = client(&h).await;
        c.submit(mkdir(&format!("/r{round}"))).await.unwrap();
        // A keep-alive HTTP connection with a request answered on it.
        let mut keep = TcpStream::connect(h.bound.http).await.unwrap();
        keep.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = keep.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "round {round}");
        h.shutdown().await.unwrap();
        // In this process, at once: a database still open would refuse
        // with RocksDB's lock error.
        let t = treelog::Treelog::open(&data, treelog::Options::default())
            .unwrap_or_else(|e| panic!("round {round}: reopen after shutdown: {e}"));
        assert!(t.stat(format!("/r{round}")).is_ok());
        t.close().unwrap();
        drop((c, keep));
    }
}
