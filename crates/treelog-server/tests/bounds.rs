//! What one client can make the server hold, and what it cannot take from
//! the others: pinned read views (a share per connection, released with
//! it), a snapshot subscription that stops reading (cut off, its RocksDB
//! snapshot released), the HTTP port held by keep-alive clients (probes
//! still answered), and writes whose sizes a quota's counters cannot hold
//! (refused, the writer still running, `verify` clean).

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use treelog::stream::{StartFrom, SubscribeOptions};
use treelog::{admin, Command, ErrorKind};
use treelog_client::Client;
use treelog_proto::protocol::RequestBody;
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::{http, poll, wire};

mod support;
use support::server::{self, client};

async fn write_all(c: &Client, cmds: impl IntoIterator<Item = Command>) {
    for r in join_all(cmds.into_iter().map(|cmd| c.submit(cmd))).await {
        r.expect("a write");
    }
}

/// `n` distinct committed states to pin: a pin of the same state twice is
/// one state.
async fn pin_distinct(pinner: &Client, writer: &Client, n: usize, tag: &str) -> Vec<u64> {
    let mut seqs = Vec::new();
    for i in 0..n {
        writer
            .submit(create(&format!("/p/{tag}-{i}")))
            .await
            .unwrap();
        match pinner.pin_view().await {
            Ok(s) => seqs.push(s),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
                break;
            }
        }
    }
    seqs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_pins_cannot_lock_the_others_listings_out() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let writer = client(&h).await;
    writer.submit(mkdir("/p")).await.unwrap();
    // One connection tries for 2,000 states: its share is 64.
    let greedy = client(&h).await;
    let held = pin_distinct(&greedy, &writer, 2_000, "g").await;
    assert_eq!(held.len(), 64, "a connection's share");
    // Another's `ls -R` pins a view of its own and walks at it.
    let other = client(&h).await;
    let walked = other.walk("/").await.expect("ls -R beside the pinner");
    assert!(walked.value.len() > 64);
    // Not another's to release.
    let e = other.unpin_view(held[0]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // Seventeen connections holding their whole share fill the table
    // (1,024): a newcomer still gets a view, from the largest holder.
    let mut hogs = vec![greedy];
    for i in 0..16 {
        let c = client(&h).await;
        let got = pin_distinct(&c, &writer, 64, &format!("h{i}")).await;
        assert!(!got.is_empty());
        hogs.push(c);
    }
    let pinned = || async { metric(h.bound.http, "treelog_pinned_read_views").await };
    assert_eq!(pinned().await, 1024, "the table is full");
    let late = client(&h).await;
    writer.submit(create("/p/late")).await.unwrap();
    late.pin_view()
        .await
        .expect("a newcomer takes from the largest holder");
    late.walk("/p").await.expect("and lists");
    // Closing the connections releases their pins.
    drop(hogs);
    drop(late);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while pinned().await != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pins released with their connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.shutdown().await.unwrap();
}

/// A snapshot subscriber that stops reading is cut off at the stall limit
/// and its RocksDB snapshot is released; the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_snapshot_subscriber_is_cut_off_and_its_snapshot_released() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| {
        c.snapshot_stall_timeout = Duration::from_secs(1);
        c.max_conn_buffer_bytes = treelog_server::MIN_CONN_BUFFER_BYTES;
    })
    .await;
    let c = client(&h).await;
    c.submit(mkdir("/s")).await.unwrap();
    // Long names: a snapshot of megabytes, more than the socket buffers
    // and the connection's queue hold.
    let long = "n".repeat(240);
    for chunk in (0..12_000).collect::<Vec<_>>().chunks(1_000) {
        write_all(&c, chunk.iter().map(|i| create(&format!("/s/{long}{i}")))).await;
    }
    let snapshots = || async { metric(h.bound.http, "treelog_rocksdb_snapshots").await };
    let before = snapshots().await;
    // A client with a small receive buffer subscribes and never reads.
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s: TcpStream = sock.connect(h.bound.rpc).await.unwrap();
    wire::handshake(&mut s).await;
    let opts = SubscribeOptions {
        from: StartFrom::Snapshot,
        ..Default::default()
    };
    s.write_all(&wire::request(1, RequestBody::Subscribe(opts)))
        .await
        .unwrap();
    let mut held = false;
    let mut released = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut k = 0;
    while tokio::time::Instant::now() < deadline && !released {
        // The subscription walks the state published when it started: a
        // write publishes a newer one, so only the subscriber holds that.
        k += 1;
        c.submit(create(&format!("/w{k}"))).await.unwrap();
        let n = snapshots().await;
        held |= n > before;
        released = held && n <= before;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held, "the subscription held a snapshot");
    assert!(
        released,
        "the snapshot was released while the client read nothing"
    );
    // The cut-off is the stream's last reply, after what was queued.
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.contains("the snapshot was not read in time"),
        "{} bytes",
        buf.len()
    );
    // Others are served meanwhile and after.
    c.submit(create("/after")).await.unwrap();
    h.shutdown().await.unwrap();
}

/// A gauge or counter of the HTTP port's `/metrics`.
async fn metric(http: SocketAddr, name: &str) -> i64 {
    let (status, body) = http::get(http, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics")) as i64
}

/// 64 keep-alive clients from four addresses hold every HTTP slot; the
/// orchestrator's probes are still answered, and a fifth address's
/// metrics request gets 503, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_keep_alive_clients_hold_the_http_port() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let mut held = Vec::new();
    for i in 0..64u8 {
        let from: SocketAddr = format!("127.0.0.{}:0", 10 + i / 16).parse().unwrap();
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(from).unwrap();
        let mut s = sock.connect(h.bound.http).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // Its response's headers: the connection then sits kept alive.
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "closed early");
            got.extend_from_slice(&b[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "connection {i}");
        held.push(s);
    }
    let sm = h.server_metrics().expect("metrics").clone();
    assert_eq!(sm.http_connections.get(), 64, "every slot held");
    for _ in 0..3 {
        assert_eq!(http::get(h.bound.http, "/readyz").await.0, 200);
        assert_eq!(http::get(h.bound.http, "/healthz").await.0, 200);
    }
    assert_eq!(http::get(h.bound.http, "/metrics").await.0, 503);
    // A seventeenth connection from a full address is no better placed.
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.10:0".parse().unwrap()).unwrap();
    let mut s = sock.connect(h.bound.http).await.unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    drop(held);
    poll::eventually(30, "the slots come back", || sm.http_connections.get() == 0).await;
    assert_eq!(http::get(h.bound.http, "/metrics").await.0, 200);
    h.shutdown().await.unwrap();
}

/// The writes of the issue that stopped the writer or saturated a quota:
/// three huge sizes under a quota, huge sizes moved into one, a quota set
/// over them. Each is refused or counted exactly, the server stays up, and
/// `verify` passes afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_past_a_quotas_counters_are_refused_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = client(&h).await;
    let big = i64::MAX as u64;
    write_all(&c, [mkdir("/q"), mkdir("/o")]).await;
    c.set_quota("/q", Some(100), None).await.unwrap();
    let set_size = |p: &str, size| Command::SetSize {
        path: p.into(),
        size,
    };
    write_all(
        &c,
        ["/q/a", "/q/b", "/q/c", "/o/a", "/o/b", "/o/c"].map(create),
    )
    .await;
    c.submit(set_size("/q/a", big)).await.unwrap();
    c.submit(set_size("/q/b", big)).await.unwrap();
    let e = c.submit(set_size("/q/c", big)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    for f in ["/o/a", "/o/b", "/o/c"] {
        c.submit(set_size(f, big)).await.unwrap();
    }
    let e = c
        .submit(Command::Rename {
            src: "/o".into(),
            dst: "/q/o".into(),
            overwrite: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = c.set_quota("/o", None, None).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // What used to stop the writer after a saturated count.
    c.submit(set_size("/q/a", 0)).await.unwrap();
    c.submit(Command::Delete {
        path: "/q/b".into(),
        recursive: false,
    })
    .await
    .unwrap();
    c.submit(mkdir("/q/after")).await.expect("the writer runs");
    assert_eq!(http::get(h.bound.http, "/readyz").await.0, 200);
    c.recount_quota("/q")
        .await
        .expect("a recount of a right counter");
    drop(c);
    h.shutdown().await.unwrap();
    let report = admin::verify_path(dir.path(), &Default::default()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
