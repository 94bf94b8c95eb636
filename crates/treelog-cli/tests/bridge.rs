//! `treelog bridge nats` as a real process killed with SIGKILL at random
//! moments while writers run (no gap, no duplicate in the stream at the
//! end: `TREELOG_KILL_ROUNDS=N` kills it N times, 20 by default), and
//! `treelog serve --bridge-nats` feeding the Python consumer of
//! `examples/python/mirror.py`, which mirrors a subtree through renames in
//! and out and must match the server's tree.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use harness::{check_stream, NatsServer};
use treelog::stream::{Filter, StartFrom, StreamItem, SubscribeOptions};
use treelog_testkit::{cli, client::connect, commands, Rng};
use treelog_testkit_nats as harness;
use treelog_testkit_server::server;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn bridge_process(server: std::net::SocketAddr, url: &str, stream: &str, log: &Path) -> Reaped {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Reaped(
        Command::new(BIN)
            .args(["--server", &server.to_string(), "bridge", "nats"])
            .args(["--nats", url, "--stream", stream, "--max-payload", "4096"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// A child process killed when the test ends, a failed assertion included
/// (a server left running would hold its ports and CPU for the next tests).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn kill9(c: &mut Child) {
    c.kill().unwrap();
    let st = c.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_the_bridge_at_random_moments_leaves_no_gap_and_no_duplicate() {
    let Some(bin) = harness::nats_server_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::single(&bin, &dir.path().join("nats"), 64 << 10);
    let url = nats.url();
    let h = server::start(&dir.path().join("db"), |_| {}).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, addr) = (stop.clone(), h.bound.rpc);
            // Big records now and then: kills land between their parts too.
            tokio::spawn(async move {
                let c = connect(addr).await;
                harness::write_load(c, format!("/w{w}"), 60, stop).await
            })
        })
        .collect();
    let mut rng = Rng::new();
    let rounds = treelog_testkit::rounds(20);
    let log = dir.path().join("bridge.log");
    for round in 0..rounds {
        let before = harness::last_published(&url, "KILL").await;
        let mut b = bridge_process(h.bound.rpc, &url, "KILL", &log);
        // Once it published something of its own, at a random moment.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while harness::last_published(&url, "KILL").await <= before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: nothing published"
            );
            assert!(
                b.0.try_wait().unwrap().is_none(),
                "round {round}: the bridge exited"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
        kill9(&mut b.0);
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let client = server::client(&h).await;
    let last = client.info().await.unwrap().0;
    let mut b = bridge_process(h.bound.rpc, &url, "KILL", &log);
    harness::wait_published(&url, "KILL", last, 120).await;
    kill9(&mut b.0);
    let parts = check_stream(&url, "KILL", &client, 1, last).await;
    assert!(parts > 0, "no record was cut into parts");
    eprintln!("{rounds} kills, {last} records, {parts} part messages");
    h.shutdown().await.unwrap();
}

/// The Python interpreter with nats-py, or `None` (said) when absent and
/// not required (`TREELOG_REQUIRE_NATS=1`).
fn python_with_nats() -> Option<String> {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import nats"])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Some(py);
    }
    let msg = format!("{py} cannot import nats (pip install nats-py)");
    assert!(
        std::env::var("TREELOG_REQUIRE_NATS").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("SKIPPED: {msg}");
    None
}

/// The server's subtree at `prefix`, from a snapshot, as the mirror prints
/// it (path → attributes).
async fn subtree(client: &treelog_client::Client, prefix: &str) -> serde_json::Value {
    let mut sub = client
        .subscribe(SubscribeOptions {
            from: StartFrom::Snapshot,
            filter: Filter {
                prefix: Some(prefix.into()),
                kinds: None,
            },
            cursor: None,
            resync_on_move_in: None,
        })
        .await
        .unwrap();
    let mut want = serde_json::Map::new();
    loop {
        match sub.next().await.unwrap().unwrap() {
            StreamItem::SnapshotEntry { path, inode } => {
                want.insert(
                    path.to_string(),
                    serde_json::to_value(&inode.attrs).unwrap(),
                );
            }
            StreamItem::SnapshotEnd { .. } => return serde_json::Value::Object(want),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_publishes_and_the_python_consumer_mirrors_a_subtree_through_renames() {
    let Some(bin) = harness::nats_server_bin() else {
        return;
    };
    let Some(py) = python_with_nats() else { return };
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::single(&bin, &dir.path().join("nats"), 1 << 20);
    let url = nats.url();
    let mut serve = Reaped(
        Command::new(BIN)
            .arg("--data")
            .arg(dir.path().join("db"))
            .args(["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--bridge-nats", &url, "--bridge-stream", "MIRROR"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (rpc, http) = cli::ready_addrs(&mut serve.0);
    let client = connect(rpc).await;
    let mk = |p: &str| commands::mkdir(p);
    let cr = |p: &str| commands::create(p);
    let mv = |a: &str, b: &str| treelog::Command::Rename {
        src: a.into(),
        dst: b.into(),
        overwrite: false,
    };
    for c in [
        mk("/m/a"),
        cr("/m/a/f1"),
        mk("/x/d/sub"),
        cr("/x/d/sub/deep"),
        cr("/x/g"),
    ] {
        client.submit(c).await.unwrap();
    }
    // The consumer's first snapshot, before the moves.
    let mut mirror = Reaped(
        Command::new(&py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python/mirror.py"))
            .args(["--nats", &url, "--stream", "MIRROR", "--treelog", BIN])
            .args(["--server", &rpc.to_string(), "--prefix", "/m"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mirror = &mut mirror.0;
    // Its output, line by line.
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let out = BufReader::new(mirror.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let next_line = || {
        tokio::task::block_in_place(|| lines.recv_timeout(Duration::from_secs(60)))
            .expect("the mirror said nothing within a minute")
    };
    let ready = next_line();
    assert!(ready.starts_with("ready "), "{ready:?}");
    let mut stdin = mirror.stdin.take().unwrap();
    // Each phase's writes, then the mirror once it is at their end beside
    // the server's subtree: the mirror answers before the next phase
    // writes, so each phase's move-in is met by the mirror's stream (a
    // resync whose snapshot is of that phase).
    let phases = vec![
        vec![mv("/x/d", "/m/d")], // a directory moves in: a resync
        vec![
            mv("/m/a/f1", "/x/f1"), // a file moves out
            mv("/x/g", "/m/g"),     // a file moves in
            mv("/m/d", "/m/e"),     // within
            cr("/m/e/sub/new"),
            treelog::Command::Complete {
                path: "/m/e/sub/new".into(),
                size: 7,
            },
            treelog::Command::SetAttr {
                path: "/m/g".into(),
                mode: Some(0o600),
                owner: Some("py".into()),
                group: None,
                mtime_ms: None,
            },
            mk("/m/e/sub2"),
            mv("/m/e/sub", "/x/sub"), // a directory moves out
            treelog::Command::Delete {
                path: "/m/a".into(),
                recursive: true,
            },
            mv("/m", "/old"), // the subtree's root moves away
            mk("/m/fresh"),
        ],
        vec![
            mv("/old/e", "/m/e"), // and a directory comes back in: a resync
            cr("/outside"),
        ],
    ];
    let mut last = 0;
    for (i, phase) in phases.into_iter().enumerate() {
        for c in phase {
            client.submit(c).await.unwrap();
        }
        last = client.info().await.unwrap().0;
        writeln!(stdin, "until {last}").unwrap();
        let got: serde_json::Value = serde_json::from_str(&next_line()).unwrap();
        assert!(got["seq"].as_u64().unwrap() >= last);
        let resyncs = [1, 1, 2][i];
        assert_eq!(
            got["resyncs"].as_u64().unwrap(),
            resyncs,
            "phase {i}: {got}"
        );
        assert_eq!(got["entries"], subtree(&client, "/m").await, "phase {i}");
    }
    drop(stdin);
    assert!(mirror.wait().unwrap().success());
    // The bridge's metrics are the server's (the ack reaching the bridge
    // may follow the consumer's delivery by a moment).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = treelog_testkit::http::get(http, "/metrics").await;
        assert_eq!(status, 200);
        let published: u64 = body
            .lines()
            .find_map(|l| l.strip_prefix("treelog_bridge_published_seq "))
            .expect("the bridge's metrics on the server's /metrics")
            .trim()
            .parse()
            .unwrap();
        if published == last {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "published {published} of {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unsafe { libc::kill(serve.0.id() as i32, libc::SIGTERM) };
    assert!(serve.0.wait().unwrap().success());
}
