//! The client against `treelog serve` processes killed with SIGKILL and
//! started again on their port, paused with SIGSTOP, and a leader killed
//! under a subscription that then goes on on its replica.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use treelog::stream::{StartFrom, StreamItem, SubscribeOptions};
use treelog::ErrorKind;
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{RequestBody, ResponseBody};
use treelog_testkit::process::free_addr;
use treelog_testkit::{cli, commands};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

struct Node {
    data: PathBuf,
    rpc: SocketAddr,
    http: SocketAddr,
    log: PathBuf,
    source: Option<SocketAddr>,
    child: Option<Child>,
}

impl Node {
    fn new(dir: &Path, name: &str, source: Option<SocketAddr>) -> Node {
        Node {
            data: dir.join(name),
            rpc: free_addr(),
            http: free_addr(),
            log: dir.join(format!("{name}.log")),
            source,
            child: None,
        }
    }

    /// `treelog serve` on the node's ports, fsyncing each commit (an
    /// acknowledged write survives SIGKILL).
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let (rpc, http) = (self.rpc.to_string(), self.http.to_string());
        let mut args = vec!["serve", "--listen", &rpc, "--http", &http];
        let source = self.source.map(|s| s.to_string());
        if let Some(s) = &source {
            args.extend(["--replica-of", s.as_str()]);
        }
        let mut cmd = cli::command(BIN, &self.data, &args);
        cmd.env("TREELOG_DURABILITY", "sync");
        cmd.stdout(Stdio::null()).stderr(log);
        self.child = Some(cmd.spawn().expect("start treelog serve"));
    }

    fn kill9(&mut self) {
        let mut c = self.child.take().expect("running");
        c.kill().unwrap();
        c.wait().unwrap();
    }

    fn signal(&self, sig: i32) {
        let c = self.child.as_ref().expect("running");
        // SAFETY: a plain signal to our own child, still running.
        assert_eq!(unsafe { libc::kill(c.id() as i32, sig) }, 0);
    }

    /// SIGSTOP, and waits until every thread of the process is stopped
    /// (the signal is delivered asynchronously).
    fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.child.as_ref().expect("running").id();
        let deadline = Instant::now() + Duration::from_secs(30);
        let stopped = || {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                return false;
            };
            tasks.flatten().all(|t| {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                // The state follows the command name's closing parenthesis.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
            })
        };
        while !stopped() {
            assert!(Instant::now() < deadline, "{pid} never stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A paused child must run again to die of SIGKILL's delivery
            // promptly on every kernel.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (up to a minute) until `node` answers a ping.
fn ready(rt: &tokio::runtime::Runtime, node: &Node) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = rt.block_on(async {
            let c = Client::connect(node.rpc, ClientOptions::default()).await;
            c.ok()?.ping().await.ok()
        });
        if up.is_some() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never answered; its log:\n{}",
            node.data.display(),
            node.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the replica at `node` has applied `seq`.
fn applied(rt: &tokio::runtime::Runtime, node: &Node, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let at = rt.block_on(async {
            let c = Client::connect(node.rpc, ClientOptions::default())
                .await
                .ok()?;
            match c.call(RequestBody::Status).await.ok()? {
                ResponseBody::Status(s) => Some(s.applied_seq),
                _ => None,
            }
        });
        if at.is_some_and(|a| a >= seq) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never applied {seq}; its log:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How one create ended.
#[derive(Debug, Default)]
struct Outcomes {
    acked: Vec<String>,
    unknown: Vec<String>,
    not_applied: Vec<(String, ErrorKind)>,
    reads_ok: u64,
    slowest: Duration,
}

#[test]
fn creates_and_stats_ride_out_a_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::new(dir.path(), "one", None);
    node.start();
    let rt = runtime();
    ready(&rt, &node);
    let deadline = Duration::from_secs(5);
    let c = rt
        .block_on(Client::connect(
            node.rpc,
            ClientOptions {
                request_timeout: deadline,
                ..Default::default()
            },
        ))
        .unwrap();
    rt.block_on(c.submit(commands::mkdir("/w"))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (c, stop) = (c.clone(), stop.clone());
        rt.spawn(async move {
            let mut out = Outcomes::default();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let path = format!("/w/f{n}");
                n += 1;
                let t = Instant::now();
                match c.submit(commands::create(&path)).await {
                    Ok(_) => out.acked.push(path.clone()),
                    Err(e) if e.kind() == ErrorKind::OutcomeUnknown => out.unknown.push(path),
                    Err(e) => {
                        assert!(e.kind().is_not_applied());
                        out.not_applied.push((path, e.kind()))
                    }
                }
                out.slowest = out.slowest.max(t.elapsed());
                let t = Instant::now();
                if let Some(last) = out.acked.last() {
                    match c.stat(last).await {
                        Ok(_) => out.reads_ok += 1,
                        Err(e) => assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}"),
                    }
                }
                out.slowest = out.slowest.max(t.elapsed());
            }
            out
        })
    };
    let acked_before = |rt: &tokio::runtime::Runtime| rt.block_on(c.ping()).unwrap_or(0);
    let floor = acked_before(&rt);
    // Some writes in, then the process dies mid-stream and comes back on
    // its port a moment later.
    let t = Instant::now();
    while acked_before(&rt) < floor + 20 {
        assert!(t.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    node.kill9();
    std::thread::sleep(Duration::from_millis(300));
    node.start();
    ready(&rt, &node);
    let restarted = acked_before(&rt);
    let t = Instant::now();
    while acked_before(&rt) < restarted + 20 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no progress after the restart; its log:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let out = rt.block_on(load).unwrap();
    // No call outlived its deadline by more than a generous margin.
    assert!(
        out.slowest < deadline + Duration::from_secs(10),
        "{:?}",
        out.slowest
    );
    assert!(out.reads_ok > 0);
    // Every acknowledged create survived; the refused ones are absent.
    for p in &out.acked {
        rt.block_on(c.stat(p))
            .unwrap_or_else(|e| panic!("{p} was acknowledged: {e}"));
    }
    for (p, kind) in &out.not_applied {
        let e = rt.block_on(c.stat(p)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{p} ({kind}) was applied");
    }
    println!(
        "{} acknowledged, {} unknown, {} not applied",
        out.acked.len(),
        out.unknown.len(),
        out.not_applied.len()
    );
}

#[test]
fn a_request_to_a_paused_server_ends_within_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::new(dir.path(), "paused", None);
    node.start();
    let rt = runtime();
    ready(&rt, &node);
    let c = rt
        .block_on(Client::connect(node.rpc, ClientOptions::default()))
        .unwrap();
    rt.block_on(c.submit(commands::mkdir("/s"))).unwrap();
    node.pause();
    let short = c.with_deadline(Duration::from_secs(2));
    let t = Instant::now();
    let e = rt.block_on(short.stat("/s")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    let e = rt
        .block_on(short.submit(commands::mkdir("/s/x")))
        .unwrap_err();
    // Sent, then no answer: it may be applied when the server resumes.
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    node.signal(libc::SIGCONT);
    assert!(rt.block_on(c.stat("/s")).unwrap().attrs.kind.is_dir());

    // With a second endpoint (a replica, up to date), a paused first one
    // is left for it.
    let committed = rt.block_on(c.ping()).unwrap();
    let mut other = Node::new(dir.path(), "replica", Some(node.rpc));
    other.start();
    ready(&rt, &other);
    applied(&rt, &other, committed);
    let c = rt
        .block_on(Client::connect_to(
            &format!("{},{}", node.rpc, other.rpc),
            ClientOptions {
                idle_timeout: Duration::from_millis(500),
                ping_timeout: Duration::from_millis(500),
                connect_timeout: Duration::from_secs(1),
                ..Default::default()
            },
        ))
        .unwrap();
    node.pause();
    let t = Instant::now();
    let got = rt.block_on(c.with_deadline(Duration::from_secs(8)).stat("/s"));
    assert!(got.unwrap().attrs.kind.is_dir());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(c.addr(), other.rpc);
    node.signal(libc::SIGCONT);
}

/// Reads `sub` until it delivered the record `upto`, keeping the records'
/// sequences in `got`.
fn records_upto(
    rt: &tokio::runtime::Runtime,
    sub: &mut treelog_client::RemoteSubscription,
    upto: u64,
    got: &mut Vec<u64>,
) {
    while got.last().is_none_or(|&l| l < upto) {
        let item = rt
            .block_on(sub.next())
            .expect("the subscription ended")
            .expect("a stream item");
        if let StreamItem::Record { seq, .. } = item {
            got.push(seq);
        }
    }
}

fn write(rt: &tokio::runtime::Runtime, w: &Client, from: usize, to: usize) -> u64 {
    let mut last = 0;
    for i in from..to {
        last = rt
            .block_on(w.submit(commands::mkdir(&format!("/s/{i}"))))
            .unwrap();
    }
    last
}

#[test]
fn a_subscription_resumes_after_a_sigkill_on_its_server_or_on_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = Node::new(dir.path(), "leader", None);
    leader.start();
    let rt = runtime();
    ready(&rt, &leader);
    let mut replica = Node::new(dir.path(), "replica", Some(leader.rpc));
    replica.start();
    ready(&rt, &replica);
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let w = rt
        .block_on(Client::connect(leader.rpc, opts.clone()))
        .unwrap();
    let last = write(&rt, &w, 0, 10);
    let from_one = SubscribeOptions {
        from: StartFrom::Seq(1),
        ..Default::default()
    };
    // One subscription knows the leader only; the other the replica too.
    let alone = rt
        .block_on(Client::connect(leader.rpc, opts.clone()))
        .unwrap();
    let mut sub1 = rt.block_on(alone.subscribe(from_one.clone())).unwrap();
    let both = rt
        .block_on(Client::connect_to(
            &format!("{},{}", leader.rpc, replica.rpc),
            opts,
        ))
        .unwrap();
    let mut sub2 = rt.block_on(both.subscribe(from_one)).unwrap();
    let (mut got1, mut got2) = (Vec::new(), Vec::new());
    records_upto(&rt, &mut sub1, last, &mut got1);
    records_upto(&rt, &mut sub2, last, &mut got2);
    assert_eq!(sub2.addr(), leader.rpc);

    // The leader killed and started again on its port; the writer's
    // client reconnects by itself.
    leader.kill9();
    leader.start();
    ready(&rt, &leader);
    let last = write(&rt, &w, 10, 20);
    applied(&rt, &replica, last);
    let want: Vec<u64> = (1..=last).collect();
    records_upto(&rt, &mut sub1, last, &mut got1);
    assert_eq!(got1, want, "gap or duplicate on the restarted server");
    assert!(sub1.reconnects() >= 1);
    assert_eq!(sub1.addr(), leader.rpc);
    // The second resumed on the next endpoint, the replica, which
    // delivered the records written since.
    records_upto(&rt, &mut sub2, last, &mut got2);
    assert_eq!(got2, want, "gap or duplicate on the replica");
    assert!(sub2.reconnects() >= 1);
    assert_eq!(sub2.addr(), replica.rpc);
    // And the replica goes on: one more write reaches it.
    let last = write(&rt, &w, 20, 21);
    records_upto(&rt, &mut sub2, last, &mut got2);
    assert_eq!(got2, (1..=last).collect::<Vec<_>>());
}

#[test]
fn writes_follow_the_leader_across_its_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut leader = Node::new(dir.path(), "leader", None);
    leader.start();
    let rt = runtime();
    ready(&rt, &leader);
    let mut replica = Node::new(dir.path(), "replica", Some(leader.rpc));
    replica.start();
    ready(&rt, &replica);
    // Knows the replica only: writes go on to the leader it names.
    let c = rt
        .block_on(Client::connect(
            replica.rpc,
            ClientOptions {
                follow_leader: true,
                leader_wait: Duration::from_secs(30),
                request_timeout: Duration::from_secs(30),
                ..Default::default()
            },
        ))
        .unwrap();
    let a = rt.block_on(c.submit(commands::mkdir("/f/a"))).unwrap();
    assert_eq!(c.addr(), replica.rpc);
    leader.kill9();
    // Down: nothing can take the write; the deadline ends it (not applied,
    // or unknown when the dead connection took it before its loss was
    // seen: the process was gone, so it is not applied either way).
    let e = rt
        .block_on(
            c.with_deadline(Duration::from_secs(1))
                .submit(commands::mkdir("/f/never")),
        )
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::DeadlineExceeded | ErrorKind::NotLeader | ErrorKind::OutcomeUnknown
        ),
        "{e}"
    );
    leader.start();
    ready(&rt, &leader);
    // The held connection to the dead leader is dropped, the replica asked
    // again, and the restarted leader takes the write.
    let b = rt.block_on(c.submit(commands::mkdir("/f/b"))).unwrap();
    assert!(b > a);
    applied(&rt, &replica, b);
    assert!(rt.block_on(c.stat("/f/b")).unwrap().attrs.kind.is_dir());
    assert_eq!(
        rt.block_on(c.stat("/f/never")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}
