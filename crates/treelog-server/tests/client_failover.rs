//! The client against servers that go away: endpoint lists (a name
//! resolved at connect, a dead first endpoint), requests across a server
//! restarted on its port, deadlines when no server answers, a silent
//! server (a stalled TCP path) noticed by the idle ping, and the blocking
//! client. Processes killed with SIGKILL or paused with SIGSTOP are
//! `treelog-cli`'s `tests/client_failover.rs`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use treelog::ErrorKind;
use treelog_client::{Client, ClientOptions};
use treelog_server::ServerHandle;
use treelog_testkit::commands::{create, mkdir};

mod support;
use support::server;

/// A loopback address with nothing listening on it (the OS's choice,
/// released).
fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn start_on(data: &Path, rpc: Option<SocketAddr>) -> ServerHandle {
    server::start(data, |c| {
        if let Some(a) = rpc {
            c.listen = a;
        }
    })
    .await
}

/// Restarts a server on the port it had (the OS may keep it a moment).
async fn restart(data: &Path, rpc: SocketAddr) -> ServerHandle {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut cfg = server::config(data);
        cfg.listen = rpc;
        match treelog_server::start(cfg).await {
            Ok(h) => return h,
            Err(e) => {
                assert!(Instant::now() < deadline, "restart on {rpc}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Whether `localhost` resolves to a loopback address here; when it does
/// not, says so and the test skips (fails with TREELOG_REQUIRE_LOCALHOST=1).
fn localhost_resolves() -> bool {
    use std::net::ToSocketAddrs;
    let ok = ("localhost", 1)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.any(|a| a.ip().is_loopback()));
    if !ok {
        assert!(
            std::env::var("TREELOG_REQUIRE_LOCALHOST").as_deref() != Ok("1"),
            "localhost does not resolve to a loopback address"
        );
        println!("SKIP: localhost does not resolve to a loopback address (/etc/hosts)");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_endpoint_is_resolved_at_connect() {
    if !localhost_resolves() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let port = h.bound.rpc.port();
    // `localhost` may name ::1 first, where nothing listens: the next
    // address it resolves to is tried.
    let c = Client::connect_to(&format!("localhost:{port}"), ClientOptions::default())
        .await
        .unwrap();
    assert_eq!(c.endpoints()[0].to_string(), format!("localhost:{port}"));
    let s = c.submit(mkdir("/by-name")).await.unwrap();
    assert!(c.stat("/by-name").await.unwrap().attrs.kind.is_dir());
    assert!(c.seen_seq() >= s);
    assert!(c.addr().ip().is_loopback());
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_endpoint_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let dead = dead_addr();
    let list = format!("{dead},{}", h.bound.rpc);
    let c = Client::connect_to(&list, ClientOptions::default())
        .await
        .unwrap();
    assert_eq!(c.addr(), h.bound.rpc);
    c.submit(mkdir("/second")).await.unwrap();
    assert!(c.stat("/second").await.unwrap().attrs.kind.is_dir());
    // The same from `connect` with the others in the options.
    let c = Client::connect(
        dead,
        ClientOptions {
            endpoints: vec![h.bound.rpc.into()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(c.endpoints().len(), 2);
    assert!(c.stat("/second").await.is_ok());
    // A list of dead endpoints only: an error, not a wait.
    let e = Client::connect_to(&format!("{dead},{}", dead_addr()), ClientOptions::default())
        .await
        .err()
        .expect("no server");
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    let e = Client::connect_to("nohost", ClientOptions::default())
        .await
        .err()
        .expect("no port");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reconnect_to_a_server_restarted_on_its_port() {
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let rpc = h.bound.rpc;
    let c = Client::connect(rpc, ClientOptions::default())
        .await
        .unwrap();
    let a = c.submit(mkdir("/a")).await.unwrap();
    h.shutdown().await.unwrap();

    // Down: a request's deadline bounds it, and a mutation that never
    // reached a server is not applied.
    let short = c.with_deadline(Duration::from_millis(500));
    let t = Instant::now();
    let e = short.stat("/a").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    let e = short.submit(mkdir("/never")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert!(e.kind().is_not_applied());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    // Back up on the same port: the next requests reconnect by themselves.
    let h = restart(dir.path(), rpc).await;
    assert!(c.stat("/a").await.unwrap().attrs.kind.is_dir());
    let b = c.submit(mkdir("/b")).await.unwrap();
    assert!(b > a);
    assert!(c.stat("/never").await.is_err());
    // A read in flight while the server restarts is sent again.
    let reader = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(3) {
                c.stat("/b").await.expect("a read across the restart");
                n += 1;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.shutdown().await.unwrap();
    let h = restart(dir.path(), rpc).await;
    assert!(reader.await.unwrap() > 0);
    assert!(c.stat("/b").await.is_ok());
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_per_handle() {
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let c = Client::connect(h.bound.rpc, ClientOptions::default())
        .await
        .unwrap();
    // The server holds a WaitFor for its timeout: the handle's deadline
    // is extended by it, so it is answered, not cut off.
    let committed = c.ping().await.unwrap();
    let short = c.with_deadline(Duration::from_secs(2));
    let got = short
        .wait_for(committed + 1000, Duration::from_secs(4))
        .await
        .unwrap();
    assert_eq!(got, committed);
    // No deadline at all, and the handles share one connection.
    let none = c.without_deadline();
    none.submit(mkdir("/x")).await.unwrap();
    assert!(short.stat("/x").await.is_ok());
    h.shutdown().await.unwrap();
}

/// A TCP relay that can be stopped in the middle of a connection: it then
/// neither forwards nor closes, as a paused process or a cut network.
struct Relay {
    addr: SocketAddr,
    stalled: Arc<AtomicBool>,
}

async fn relay(to: SocketAddr) -> Relay {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let stalled = Arc::new(AtomicBool::new(false));
    let st = stalled.clone();
    tokio::spawn(async move {
        while let Ok((a, _)) = l.accept().await {
            let Ok(b) = TcpStream::connect(to).await else {
                continue;
            };
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            tokio::spawn(pipe(ar, bw, st.clone()));
            tokio::spawn(pipe(br, aw, st.clone()));
        }
    });
    Relay { addr, stalled }
}

async fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Stalled: hold the bytes (and the socket) forever.
        while stalled.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_left_for_the_next_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let r = relay(h.bound.rpc).await;
    let c = Client::connect_to(
        &format!("{},{}", r.addr, h.bound.rpc),
        ClientOptions {
            idle_timeout: Duration::from_millis(300),
            ping_timeout: Duration::from_millis(300),
            connect_timeout: Duration::from_millis(500),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(c.addr(), r.addr);
    c.submit(mkdir("/p")).await.unwrap();
    // One endpoint only, connected before the path stalls.
    let alone = Client::connect(r.addr, ClientOptions::default())
        .await
        .unwrap();
    r.stalled.store(true, Ordering::Relaxed);
    // The read waits on the stalled path until the ping finds it dead,
    // then goes to the second endpoint.
    let t = Instant::now();
    let d = Duration::from_secs(20);
    assert!(c
        .with_deadline(d)
        .stat("/p")
        .await
        .unwrap()
        .attrs
        .kind
        .is_dir());
    assert!(t.elapsed() < d, "{:?}", t.elapsed());
    assert_eq!(c.addr(), h.bound.rpc);

    // One endpoint, silent: a request's deadline ends it.
    let t = Instant::now();
    let e = alone
        .with_deadline(Duration::from_secs(2))
        .stat("/p")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_cut_off_after_it_was_sent_is_outcome_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let h = start_on(dir.path(), None).await;
    let r = relay(h.bound.rpc).await;
    let c = Client::connect(r.addr, ClientOptions::default())
        .await
        .unwrap();
    c.submit(mkdir("/m")).await.unwrap();
    r.stalled.store(true, Ordering::Relaxed);
    let e = c
        .with_deadline(Duration::from_millis(500))
        .submit(create("/m/f"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert!(!e.kind().is_not_applied());
    h.shutdown().await.unwrap();
}

#[test]
fn the_blocking_client_stats_creates_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let h = rt.block_on(start_on(dir.path(), None));
    let c = treelog_client::blocking::Client::connect_to(
        &h.bound.rpc.to_string(),
        ClientOptions::default(),
    )
    .unwrap();
    let d = c.submit(mkdir("/d")).unwrap();
    let f = c.submit(create("/d/f")).unwrap();
    assert!(f > d);
    assert!(c.stat("/d").unwrap().attrs.kind.is_dir());
    assert!(!c.stat("/d/f").unwrap().attrs.kind.is_dir());
    let page = c.list("/d", None, 10).unwrap();
    let names: Vec<&str> = page
        .entries
        .iter()
        .map(|e| e.name.to_str().unwrap())
        .collect();
    assert_eq!(names, ["f"]);
    assert_eq!(c.stat("/nope").unwrap_err().kind(), ErrorKind::NotFound);
    assert!(c.ping().unwrap() >= f);
    let short = c.with_deadline(Duration::from_secs(5));
    assert!(short.stat("/d/f").is_ok());
    let mut sub = c
        .subscribe(treelog::stream::SubscribeOptions {
            from: treelog::stream::StartFrom::Seq(d),
            ..Default::default()
        })
        .unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 2 {
        if let treelog::stream::StreamItem::Record { seq, .. } = sub.next_item().unwrap().unwrap() {
            seqs.push(seq);
        }
    }
    assert_eq!(seqs, [d, f]);
    rt.block_on(h.shutdown()).unwrap();
}

/// A TCP proxy on threads of its own (it runs while the client's runtime
/// is stopped) whose [`CuttingProxy::cut`] ends the connections it holds
/// from the client's side, as a server's kernel does when the process
/// dies.
struct CuttingProxy {
    addr: SocketAddr,
    clients: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl CuttingProxy {
    fn start(to: SocketAddr) -> CuttingProxy {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let clients = Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = clients.clone();
        std::thread::spawn(move || {
            for a in l.incoming() {
                let Ok(a) = a else { return };
                let Ok(b) = std::net::TcpStream::connect(to) else {
                    continue;
                };
                held.lock().unwrap().push(a.try_clone().unwrap());
                for (mut r, mut w) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut r, &mut w);
                        let _ = w.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        CuttingProxy { addr, clients }
    }

    /// Ends every connection taken so far; returns once the FINs are sent.
    fn cut(&self) {
        for c in self.clients.lock().unwrap().drain(..) {
            c.shutdown(std::net::Shutdown::Both).unwrap();
        }
    }
}

/// A server that ended the connection before a mutation was sent (a leader
/// killed a moment ago): the client's reader has not run since, so the
/// connection still looks open, but nothing was sent and the mutation goes
/// to a new connection, applied once, instead of `OutcomeUnknown`.
#[test]
fn a_mutation_after_the_server_ended_the_connection_goes_to_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let servers = tokio::runtime::Runtime::new().unwrap();
    let h = servers.block_on(start_on(dir.path(), None));
    let proxy = CuttingProxy::start(h.bound.rpc);
    // The client's runtime runs only inside `block_on`: between two calls
    // its reader cannot see the connection end.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt
        .block_on(Client::connect(proxy.addr, ClientOptions::default()))
        .unwrap();
    let first = rt.block_on(c.submit(mkdir("/m"))).unwrap();
    proxy.cut();
    let seq = rt
        .block_on(c.submit(create("/m/f")))
        .expect("sent on a new connection");
    assert!(seq > first);
    let list = rt.block_on(c.list("/m", None, 10)).unwrap();
    assert_eq!(list.entries.len(), 1, "applied once: {list:?}");
    drop(c);
    drop(rt);
    servers.block_on(h.shutdown()).unwrap();
}
