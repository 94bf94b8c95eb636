//! Server resource bounds measured on the whole process (its threads,
//! virtual memory and file descriptors) with real clients over loopback.
//! The tests here take turns (`serial`): each measures or changes state
//! that a test running beside it would disturb.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use treelog::stream::{Filter, StartFrom, SubscribeOptions};
use treelog::ErrorKind;
use treelog_client::Client;
use treelog_proto::protocol::{self, RequestBody, ResponseBody, ServerMsg};
use treelog_server::{ServerHandle, ServerMetrics};
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::poll::{eventually, peak};
use treelog_testkit::{cli, wire};
use treelog_testkit_server::server::{self, metrics, server_metrics};

/// Held for a whole test (across awaits: each test has its own runtime).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A raw connection past the handshake that reads nothing by itself.
async fn welcome(addr: SocketAddr) -> TcpStream {
    // A fixed, small receive buffer: loopback's autotuning may otherwise
    // grow it to `tcp_rmem`'s maximum (32 MiB here), enough to swallow
    // every reply a test means to leave unread, and the server's queue
    // would never fill.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(64 << 10).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    wire::handshake(&mut s).await;
    s
}

/// A server whose connections may each queue `bound` bytes of replies,
/// its metrics, and a client that made `/d` with `n` files of ~200-byte
/// names.
async fn server_with_wide_dir(
    dir: &std::path::Path,
    bound: usize,
    n: usize,
) -> (ServerHandle, Arc<ServerMetrics>, Client) {
    let h = server::start(dir, |c| c.max_conn_buffer_bytes = bound).await;
    let m = server_metrics(&h);
    let c = server::client(&h).await;
    c.submit(mkdir("/d")).await.unwrap();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.submit(create(&format!("/d/{i:05}{}", "n".repeat(200))))
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    (h, m, c)
}

/// Samples the peak of the bytes queued for the server's connections.
fn peak_queued(m: &Arc<ServerMetrics>) -> (Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let m = m.clone();
    peak(move || m.queued_bytes.get())
}

/// A client that pipelines `List`s of a large directory and reads nothing:
/// the replies queued for it stay within `max_conn_buffer_bytes` (plus a
/// reply per worker thread being made as it filled), the server stops
/// reading its requests, other clients are served, and every reply still
/// arrives once it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_bounded_memory() {
    let _turn = TURN.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let bound = 256 << 10;
    let (h, m, c) = server_with_wide_dir(dir.path(), bound, 1000).await;
    let page = c.list("/d", None, 10_000).await.unwrap();
    assert_eq!(page.entries.len(), 1000);
    let reply = protocol::encode(&ServerMsg::Response {
        id: 1,
        body: ResponseBody::Page(page),
    })
    .unwrap()
    .len();
    let (queued, sampler) = peak_queued(&m);
    let mut s = welcome(h.bound.rpc).await;
    let list = RequestBody::List {
        path: "/d".into(),
        start_after: None,
        limit: 10_000,
    };
    s.write_all(&wire::requests(1..=100, &list)).await.unwrap();
    // 100 replies (~26 MB) do not fit the socket buffers: the queue fills.
    eventually(60, "a full queue", || m.queued_bytes.get() >= bound as i64).await;
    // Requests that arrive while it is full are not read (the server waits
    // for room). More requests until the server is seen holding one back:
    // on a loaded machine the queue can dip below the bound as the socket
    // buffers grow, and a request read then is served, not held.
    let mut n: u64 = 100;
    while m.backpressure.get() == 0 {
        assert!(n < 1000, "never: back-pressure ({n} requests sent)");
        s.write_all(&wire::requests(n + 1..=n + 10, &list))
            .await
            .unwrap();
        n += 10;
        let settle = tokio::time::Instant::now() + Duration::from_secs(2);
        while m.backpressure.get() == 0 && tokio::time::Instant::now() < settle {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let total = n;
    // Another client is served meanwhile.
    let other = server::client(&h).await;
    tokio::time::timeout(Duration::from_secs(30), other.stat("/d"))
        .await
        .expect("another client's stat waited for the stalled one")
        .unwrap();
    let most = queued.load(Ordering::Relaxed) as usize;
    assert!(
        most <= bound + 3 * reply,
        "{most} bytes queued for one connection (bound {bound}, a reply {reply})"
    );
    // Reading resumes the connection: every reply arrives, whole.
    let mut ids = Vec::new();
    while ids.len() < total as usize {
        match wire::recv(&mut s, 64 << 20, Duration::from_secs(60)).await {
            ServerMsg::Response {
                id,
                body: ResponseBody::Page(p),
            } => {
                assert_eq!(p.entries.len(), 1000);
                ids.push(id);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=total).collect::<Vec<_>>());
    sampler.abort();
    drop(s);
    eventually(30, "the queue drained", || m.queued_bytes.get() == 0).await;
    h.shutdown().await.unwrap();
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Snapshot subscriptions that are never read hold no thread each, and
/// what they queue stays within the connection's bound.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_read_snapshot_subscriptions_hold_no_threads() {
    let _turn = TURN.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let bound = 256 << 10;
    // 3000 entries of ~300 bytes per snapshot: 40 of them (~36 MB) do not
    // fit the socket buffers.
    let (h, m, c) = server_with_wide_dir(dir.path(), bound, 3000).await;
    let store_metrics = metrics(&h);
    let (queued, sampler) = peak_queued(&m);
    let before = threads();
    let mut s = welcome(h.bound.rpc).await;
    const N: u64 = 40;
    let snapshot = RequestBody::Subscribe(SubscribeOptions {
        from: StartFrom::Snapshot,
        filter: Filter {
            prefix: Some("/d".into()),
            kinds: None,
        },
        ..Default::default()
    });
    s.write_all(&wire::requests(1..=N, &snapshot))
        .await
        .unwrap();
    eventually(60, "all subscriptions started", || {
        store_metrics.streams().subscribers.get() == N as i64
    })
    .await;
    eventually(60, "the connection's queue filled", || {
        m.queued_bytes.get() >= bound as i64
    })
    .await;
    let after = threads();
    assert!(
        after <= before + 4,
        "{} threads for {N} unread snapshot subscriptions",
        after - before
    );
    tokio::time::timeout(Duration::from_secs(30), c.stat("/d"))
        .await
        .expect("another client's stat waited for the stalled one")
        .unwrap();
    let most = queued.load(Ordering::Relaxed) as usize;
    // One delivery thread: the queue exceeds its bound by one item at most.
    assert!(
        most <= bound + (64 << 10),
        "{most} bytes queued (bound {bound})"
    );
    sampler.abort();
    // Closing the connection ends its subscriptions and frees the queue.
    drop(s);
    eventually(30, "subscriptions ended", || {
        store_metrics.streams().subscribers.get() == 0
    })
    .await;
    eventually(30, "the queue drained", || m.queued_bytes.get() == 0).await;
    h.shutdown().await.unwrap();
}

fn vm_peak() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmPeak:"))
        .expect("VmPeak");
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        << 10
}

/// A length prefix promising `max_frame` bytes does not make the server
/// allocate them before they arrive: the process's peak virtual size does
/// not grow by a frame's worth while four connections each promise 256 MiB
/// and send 1000 bytes (until the idle timeout closes them).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_length_prefix_alone_does_not_allocate_the_frame() {
    let _turn = TURN.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |c| {
        c.max_frame = treelog_server::MAX_MAX_FRAME;
        c.idle_timeout = Duration::from_secs(2);
    })
    .await;
    let c = server::client(&h).await;
    c.ping().await.unwrap();
    let before = vm_peak();
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut s = welcome(h.bound.rpc).await;
        let mut partial = (treelog_server::MAX_MAX_FRAME as u32)
            .to_be_bytes()
            .to_vec();
        partial.extend([0u8; 1000]);
        s.write_all(&partial).await.unwrap();
        conns.push(s);
    }
    // Each is closed for not completing its frame: the server was reading
    // it all that time.
    for s in conns.iter_mut() {
        let (kind, message) = wire::recv_fatal(s, Duration::from_secs(30)).await;
        assert_eq!(kind, ErrorKind::Protocol, "{message}");
        assert!(message.contains("no complete frame"), "{message}");
    }
    let grew = vm_peak().saturating_sub(before);
    assert!(
        grew < 200 << 20,
        "peak virtual memory grew by {} MiB",
        grew >> 20
    );
    // (The idle timeout closed `c` meanwhile.)
    let c = server::client(&h).await;
    c.ping().await.unwrap();
    h.shutdown().await.unwrap();
}

#[cfg(unix)]
fn nofile() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    (r.rlim_cur, r.rlim_max)
}

#[cfg(unix)]
fn set_soft_nofile(soft: u64) {
    let (_, hard) = nofile();
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Out of file descriptors, `accept` fails while a connection waits: the
/// server backs off (10 ms, doubling) instead of spinning, counts each
/// failure, and accepts the connection once descriptors are free again.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_errors_back_off_and_are_counted() {
    let _turn = TURN.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let m = server_metrics(&h);
    let errors = || m.accept_errors.with_label_values(&["rpc"]).get();
    let c = server::client(&h).await;
    c.ping().await.unwrap();
    let (soft, _) = nofile();
    // Use up every descriptor but one, for the client's socket.
    set_soft_nofile(open_fds() as u64 + 16);
    let mut hog = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        hog.push(f);
    }
    hog.pop();
    let connecting = TcpStream::connect(h.bound.rpc).await;
    let t0 = std::time::Instant::now();
    // A failure guard, not a timing assertion.
    while errors() < 3 && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = t0.elapsed();
    let n = errors();
    // Free the descriptors before asserting (a failed assertion must not
    // leave the process without any).
    drop(hog);
    set_soft_nofile(soft);
    assert!(n >= 3, "no accept errors counted in {elapsed:?}");
    // A busy loop fails thousands of times in this span; with the backoff
    // the first retry waits 10 ms and each one after it longer.
    assert!(
        n as u128 <= 2 + elapsed.as_millis() / 10,
        "{n} accept errors in {elapsed:?}"
    );
    // The waiting connection is served (accepted, its handshake answered
    // within 30 s) once descriptors are back.
    wire::handshake(&mut connecting.unwrap()).await;
    c.ping().await.unwrap();
    h.shutdown().await.unwrap();
}

/// Runs `treelog serve` with an open-file limit of `nofile` (soft and
/// hard) and `args`; returns the child once it said "ready", or its exit
/// status and stderr when it did not start.
#[cfg(unix)]
fn serve_with_nofile(
    data: &std::path::Path,
    nofile: u64,
    args: &[&str],
) -> Result<(std::process::Child, String), (i32, String)> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let serve = ["--durability", "none", "serve", "--http", "127.0.0.1:0"];
    let mut cmd = cli::command(env!("CARGO_BIN_EXE_treelog"), data, &serve);
    cmd.args(if args.contains(&"--listen") {
        &[][..]
    } else {
        &["--listen", "127.0.0.1:0"][..]
    })
    .args(args)
    .stderr(std::process::Stdio::piped())
    .stdout(std::process::Stdio::null());
    // SAFETY: only async-signal-safe setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: nofile as libc::rlim_t,
                rlim_max: nofile as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run treelog");
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no stderr pipe");
    };
    let mut err = std::io::BufReader::new(stderr);
    let mut text = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let status = child.wait().unwrap();
            return Err((status.code().unwrap_or(-1), text));
        }
        text.push_str(&line);
        if line.contains("ready") {
            // Keep the pipe open (and drained) for what it prints on exit.
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
            return Ok((child, text));
        }
    }
}

/// Stops a running `treelog serve` with SIGTERM: it exits with success.
#[cfg(unix)]
fn terminate(mut child: std::process::Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// The connection limits are checked against RLIMIT_NOFILE at start:
/// lowered with a warning when some fit, refused when too few would.
#[cfg(target_os = "linux")]
#[test]
fn the_connection_limit_is_fitted_to_the_open_file_limit() {
    let _turn = TURN.blocking_lock();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    // 600 descriptors: 600 - 64 HTTP - 384 reserved = 152 connections.
    let (child, text) = serve_with_nofile(&data, 600, &[]).expect("serve did not start");
    assert!(
        text.contains("WARN") && text.contains("from 1024 to 152"),
        "{text}"
    );
    terminate(child);
    // Explicit limits that fit: no warning.
    let (child, text) = serve_with_nofile(
        &data,
        600,
        &["--max-connections", "100", "--max-http-connections", "8"],
    )
    .expect("serve did not start");
    assert!(!text.contains("WARN"), "{text}");
    terminate(child);
    // 400 descriptors leave none for clients: refused, exit code 8.
    let (code, text) = serve_with_nofile(&data, 400, &[]).expect_err("refused");
    assert_eq!(code, 8, "{text}");
    assert!(text.contains("RLIMIT_NOFILE"), "{text}");
    // Bad limits are refused by the CLI with a clear message.
    for args in [
        &["--max-frame", "0"][..],
        &["--max-frame", "4294967296"],
        &["--listen", "0.0.0.0:0"],
    ] {
        let (code, text) = serve_with_nofile(&data, 4096, args).expect_err("refused");
        assert_eq!(code, 8, "{args:?}: {text}");
        assert!(
            text.contains("--max-frame") || text.contains("--allow-insecure-listen"),
            "{text}"
        );
    }
}
