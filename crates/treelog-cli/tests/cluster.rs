//! A three-node Raft cluster of real `treelog serve --node-id` processes on
//! loopback, its leader killed with SIGKILL again and again (20 times;
//! `TREELOG_KILL_ROUNDS=N` for more) and restarted, while clients write
//! and read through whichever node they reach (following `NotLeader`).
//! Every operation's invocation, response and result is recorded, and the
//! history is checked for linearizability path by path
//! (tests/common/history.rs); at the end every node holds the same index
//! at the same sequence. The failover times (SIGKILL of the leader to the
//! first write acknowledged by the next) are printed. The same again (5
//! rounds) with mutual TLS between the nodes and TLS to the clients, every
//! node refusing plaintext.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treelog::error::{Error, ErrorKind};
use treelog::{Command, ReadAt};
use treelog_client::{Client, ClientOptions, ClientTls};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};
use treelog_testkit::history::{self, Entry, Op, Outcome};
use treelog_testkit::process::free_addr;
use treelog_testkit::{cli, poll, rounds, Rng};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// The client TLS of the nodes listening at these addresses (the test's
/// own clients connect with it); nodes not in it speak plaintext. By
/// address, not per test: each node's port is its own in this process.
static TLS: Mutex<Vec<(SocketAddr, Arc<ClientTls>)>> = Mutex::new(Vec::new());

fn client_tls(addr: SocketAddr) -> Option<Arc<ClientTls>> {
    let t = TLS.lock().unwrap();
    t.iter().find(|(a, _)| *a == addr).map(|(_, t)| t.clone())
}

/// The certificates of a TLS cluster (made by `treelog admin certs`): one
/// node certificate for all (it names 127.0.0.1), one client's.
struct Pki {
    dir: tempfile::TempDir,
    client: Arc<ClientTls>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().to_str().unwrap();
        let r = cli::run(
            BIN,
            dir.path(),
            &[
                "admin", "certs", "--out", out, "--node", "node", "--client", "client",
            ],
        );
        assert_eq!(r.code(), 0, "admin certs: {}", r.stderr);
        let p = |f: &str| dir.path().join(f);
        let client =
            ClientTls::load(&p("ca.pem"), Some((&p("client.pem"), &p("client-key.pem")))).unwrap();
        Pki {
            client: Arc::new(client),
            dir,
        }
    }

    /// `serve`'s flags: its certificate (also its client certificate
    /// towards its peers), the CA, and TLS only, mutual.
    fn serve_args(&self) -> Vec<String> {
        let p = |f: &str| self.dir.path().join(f).to_str().unwrap().to_owned();
        vec![
            "--tls-cert".into(),
            p("node.pem"),
            "--tls-key".into(),
            p("node-key.pem"),
            "--tls-ca".into(),
            p("ca.pem"),
            "--require-tls".into(),
            "--require-client-cert".into(),
        ]
    }
}

struct Node {
    id: u64,
    data: PathBuf,
    rpc: SocketAddr,
    http: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
    /// `serve`'s TLS flags (none: plaintext).
    tls_args: Vec<String>,
}

impl Node {
    fn new(dir: &Path, id: u64) -> Node {
        Node {
            id,
            data: dir.join(format!("node{id}")),
            rpc: free_addr(),
            http: free_addr(),
            log: dir.join(format!("node{id}.log")),
            child: None,
            tls_args: Vec::new(),
        }
    }

    /// A node of a TLS cluster: it serves TLS only, and the test's
    /// clients reach it with `pki`'s client certificate.
    fn with_tls(mut self, pki: &Pki) -> Node {
        self.tls_args = pki.serve_args();
        TLS.lock().unwrap().push((self.rpc, pki.client.clone()));
        self
    }

    fn start(&mut self) {
        self.start_with(&[], None);
    }

    /// Starts it with `extra` arguments and, if any, `FAILPOINTS`.
    fn start_with(&mut self, extra: &[&str], failpoints: Option<&str>) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let (rpc, http, id) = (
            self.rpc.to_string(),
            self.http.to_string(),
            self.id.to_string(),
        );
        let mut args = vec!["serve", "--listen", &rpc, "--http", &http, "--node-id", &id];
        args.extend(extra);
        args.extend(self.tls_args.iter().map(String::as_str));
        let mut cmd = cli::command(BIN, &self.data, &args);
        cmd.stdout(Stdio::null()).stderr(log);
        if let Some(f) = failpoints {
            cmd.env("FAILPOINTS", f);
        }
        self.child = Some(cmd.spawn().expect("start treelog serve"));
    }

    /// Waits until the process ends by itself (a crash point).
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    fn wait_dead(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "node {} did not crash", self.id);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and waits for a clean exit.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a plain signal to our own child.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let st = c.wait().unwrap();
            assert!(st.success(), "node {} ended with {st}", self.id);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn connect(addr: SocketAddr) -> Option<Client> {
    Client::connect(
        addr,
        ClientOptions {
            follow_leader: true,
            connect_timeout: Duration::from_secs(2),
            tls: client_tls(addr),
            ..Default::default()
        },
    )
    .await
    .ok()
}

async fn cluster(addr: SocketAddr, req: ClusterRequest) -> treelog::Result<ClusterStatus> {
    let c = connect(addr)
        .await
        .ok_or_else(|| Error::Busy(format!("{addr} is down")))?;
    match c.call(RequestBody::Cluster(req)).await? {
        ResponseBody::Cluster(s) => Ok(s),
        other => panic!("unexpected {other:?}"),
    }
}

/// Waits until `addr` answers a status; the leader's id if it knows one.
/// Waits until every node of `ids` has applied `seq` and all are at the
/// same position.
async fn converge(ids: &[(u64, SocketAddr)], seq: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut at = Vec::new();
        for (_, a) in ids {
            at.push(
                cluster(*a, ClusterRequest::Status)
                    .await
                    .ok()
                    .and_then(|s| s.applied),
            );
        }
        if at
            .iter()
            .all(|a| a.is_some_and(|a| a >= seq) && *a == at[0])
        {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {at:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_up(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster(addr, ClusterRequest::Status).await.is_err() {
        assert!(Instant::now() < deadline, "{addr} did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node the live nodes agree leads.
async fn leader(nodes: &[(u64, SocketAddr)]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (id, addr) in nodes {
            if let Ok(s) = cluster(*addr, ClusterRequest::Status).await {
                if s.state == "leader" {
                    return *id;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const PATHS: usize = 24;
const WRITERS: usize = 6;

fn path(i: usize) -> String {
    format!("/h/p{i:02}")
}

/// What one writer's operation returned, in the history's terms; `None`:
/// it did not happen (refused before anything was written) and is left out.
fn outcome(op: Op, r: &treelog::Result<Option<u64>>) -> Option<Outcome> {
    match r {
        Ok(Some(size)) => Some(Outcome::Size(*size)),
        Ok(None) => Some(Outcome::Done),
        Err(e) => match e.kind() {
            ErrorKind::AlreadyExists => Some(Outcome::Exists),
            ErrorKind::NotFound => Some(Outcome::Missing),
            ErrorKind::OutcomeUnknown if op != Op::Stat => Some(Outcome::Unknown),
            // Not applied (NotLeader, WriterStopped, a connection that
            // failed before the request went, Busy, Lagging), or a read
            // that did not answer: no effect.
            _ => None,
        },
    }
}

async fn run_op(c: &Client, op: Op, p: &str) -> treelog::Result<Option<u64>> {
    match op {
        Op::Create => c
            .submit(Command::Create {
                path: p.into(),
                parents: false,
                mode: 0o644,
                owner: String::new(),
                group: String::new(),
                block_size: 4096,
            })
            .await
            .map(|_| None),
        Op::Delete => c
            .submit(Command::Delete {
                path: p.into(),
                recursive: false,
            })
            .await
            .map(|_| None),
        Op::SetSize(v) => c
            .submit(Command::SetSize {
                path: p.into(),
                size: v,
            })
            .await
            .map(|_| None),
        Op::Stat => c
            .stat_at(p, ReadAt::Linearizable)
            .await
            .map(|r| Some(r.value.attrs.size)),
    }
}

/// One client: random operations on the shared paths through a node it
/// picks (another one when it loses it), recorded in `history`.
async fn writer(
    seed: u64,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Entry>>>,
    acks: Arc<AtomicU64>,
) {
    let mut rng = Rng::nth(seed);
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Acquire) {
        let c = match &client {
            Some(c) => c.clone(),
            None => match connect(addrs[rng.below(addrs.len() as u64) as usize]).await {
                Some(c) => {
                    client = Some(c.clone());
                    c
                }
                None => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let p = path(rng.below(PATHS as u64) as usize);
        let op = match rng.below(10) {
            0..=2 => Op::Create,
            3..=4 => Op::Delete,
            5..=6 => Op::SetSize(rng.below(1000)),
            _ => Op::Stat,
        };
        let call = Instant::now();
        let r = run_op(&c, op, &p).await;
        let ret = Instant::now();
        if let Some(o) = outcome(op, &r) {
            if o != Outcome::Unknown && op != Op::Stat {
                acks.fetch_add(1, Ordering::Relaxed);
            }
            history.lock().unwrap().push(Entry {
                path: p,
                op,
                outcome: o,
                call,
                ret: (o != Outcome::Unknown).then_some(ret),
            });
        }
        if let Err(e) = &r {
            if matches!(
                e.kind(),
                ErrorKind::Protocol
                    | ErrorKind::OutcomeUnknown
                    | ErrorKind::Busy
                    | ErrorKind::NotLeader
            ) {
                // Its node may be gone: another one next time.
                client = None;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_under_kill_9_keeps_every_acknowledged_write_and_stays_linearizable() {
    failover(None, rounds(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_with_mutual_tls_between_nodes_and_tls_to_clients() {
    let pki = Pki::new();
    failover(Some(&pki), rounds(5)).await;
}

/// `kills` rounds of SIGKILL of the leader under load (see the module's
/// documentation), the cluster on TLS with `pki`.
async fn failover(pki: Option<&Pki>, kills: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|id| {
            let n = Node::new(dir.path(), id);
            match pki {
                Some(pki) => n.with_tls(pki),
                None => n,
            }
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    for n in &nodes {
        wait_up(n.rpc).await;
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.rpc).collect();
    let ids: Vec<(u64, SocketAddr)> = nodes.iter().map(|n| (n.id, n.rpc)).collect();
    cluster(addrs[0], ClusterRequest::Init).await.unwrap();
    leader(&ids[..1]).await;
    for n in &nodes[1..] {
        cluster(
            addrs[0],
            ClusterRequest::AddLearner {
                node: n.id,
                addr: n.rpc.to_string(),
                wait: true,
            },
        )
        .await
        .unwrap();
    }
    cluster(addrs[0], ClusterRequest::Promote { nodes: vec![2, 3] })
        .await
        .unwrap();
    let c = connect(addrs[0]).await.unwrap();
    c.submit(Command::Mkdir {
        path: "/h".into(),
        parents: true,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let acks = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|i| {
            tokio::spawn(writer(
                0x5eed + i as u64,
                addrs.clone(),
                stop.clone(),
                history.clone(),
                acks.clone(),
            ))
        })
        .collect();

    let mut failovers = Vec::new();
    for round in 0..kills {
        // Some writes under this leader first.
        let before = acks.load(Ordering::Relaxed);
        poll::eventually(60, "writes go on", || {
            acks.load(Ordering::Relaxed) >= before + 20
        })
        .await;
        let l = leader(&ids).await;
        let killed = Instant::now();
        nodes[(l - 1) as usize].kill();
        // The first write the next leader acknowledges.
        let probe = format!("/probe{round}");
        let others: Vec<SocketAddr> = ids
            .iter()
            .filter(|(id, _)| *id != l)
            .map(|(_, a)| *a)
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        'probe: loop {
            assert!(
                Instant::now() < deadline,
                "no leader took a write after node {l} died"
            );
            for a in &others {
                if let Some(c) = connect(*a).await {
                    let r = c
                        .submit(Command::Mkdir {
                            path: probe.clone().into(),
                            parents: true,
                            mode: 0o755,
                            owner: String::new(),
                            group: String::new(),
                        })
                        .await;
                    if r.is_ok() {
                        break 'probe;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        failovers.push(killed.elapsed());
        nodes[(l - 1) as usize].start();
        wait_up(nodes[(l - 1) as usize].rpc).await;
    }
    stop.store(true, Ordering::Release);
    for w in writers {
        w.await.unwrap();
    }

    // Every path read once more, linearizably, after everything else.
    let l = leader(&ids).await;
    let c = connect(ids[(l - 1) as usize].1).await.unwrap();
    for i in 0..PATHS {
        let p = path(i);
        let call = Instant::now();
        let r = run_op(&c, Op::Stat, &p).await;
        let o = outcome(Op::Stat, &r).expect("the final read answers");
        history.lock().unwrap().push(Entry {
            path: p,
            op: Op::Stat,
            outcome: o,
            call,
            ret: Some(Instant::now()),
        });
    }
    let h = history.lock().unwrap().clone();
    let unknown = h.iter().filter(|e| e.outcome == Outcome::Unknown).count();
    if let Err(e) = history::check(&h) {
        panic!("{e}");
    }

    // Every node at the same sequence holds the same index.
    let committed = c.ping().await.unwrap();
    converge(&ids, committed, "the nodes do not converge").await;
    for n in &mut nodes {
        n.stop();
    }
    let mut digests = Vec::new();
    for n in &nodes {
        let t = treelog::Treelog::open(
            &n.data,
            treelog::Options {
                role: treelog::replication::NodeRole::Consensus(
                    treelog::replication::ConsensusNode { node_id: n.id },
                ),
                ..Default::default()
            },
        )
        .unwrap();
        let d = treelog::admin::index_summary(t.store()).unwrap();
        digests.push((t.committed_seq(), d.digest));
    }
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "the nodes' indexes differ: {digests:?}"
    );

    let mut ms: Vec<f64> = failovers.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    println!(
        "failovers{}: {} (heartbeat 100 ms, election timeout 300-600 ms); kill -9 of the leader to \
         the next leader's first acknowledged write: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
         {} operations checked ({} of unknown outcome), {} acknowledged writes",
        if pki.is_some() { " over mutual TLS" } else { "" },
        ms.len(),
        pct(0.5),
        pct(0.99),
        ms[ms.len() - 1],
        h.len(),
        unknown,
        acks.load(Ordering::Relaxed)
    );
}

/// A node killed (SIGKILL, by a crash point) in the middle of installing
/// the leader's snapshot — after it marked the install and before the new
/// index was flushed, or right after the mark — finishes the install when
/// it starts again and ends with the others' index.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_install_killed_midway_is_finished_by_the_next_start() {
    for point in ["install::before_flush", "install::after_mark"] {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(dir.path(), id)).collect();
        // Snapshots and purges often: node 3 joins far behind.
        let often = [
            "--raft-snapshot-every",
            "200",
            "--raft-keep-after-snapshot",
            "10",
        ];
        for n in &mut nodes[..2] {
            n.start_with(&often, None);
        }
        for n in &nodes[..2] {
            wait_up(n.rpc).await;
        }
        let ids: Vec<(u64, SocketAddr)> = nodes.iter().map(|n| (n.id, n.rpc)).collect();
        cluster(ids[0].1, ClusterRequest::Init).await.unwrap();
        cluster(
            ids[0].1,
            ClusterRequest::AddLearner {
                node: 2,
                addr: ids[1].1.to_string(),
                wait: true,
            },
        )
        .await
        .unwrap();
        cluster(ids[0].1, ClusterRequest::Promote { nodes: vec![2] })
            .await
            .unwrap();
        let c = connect(ids[0].1).await.unwrap();
        let mkdir = |p: String| Command::Mkdir {
            path: p.into(),
            parents: true,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        };
        for i in 0..400 {
            c.submit(mkdir(format!("/s/d{i}"))).await.unwrap();
        }
        // Node 3's ports are picked now, just before it binds them: picked
        // at the start, one could be taken meanwhile by a connection of
        // this test or of the tests beside it (outgoing connections take
        // their local ports from the same range).
        nodes[2] = Node::new(dir.path(), 3);
        let ids: Vec<(u64, SocketAddr)> = nodes.iter().map(|n| (n.id, n.rpc)).collect();
        // Node 3 dies inside its first install.
        nodes[2].start_with(&often, Some(&format!("{point}=return")));
        wait_up(ids[2].1).await;
        cluster(
            ids[0].1,
            ClusterRequest::AddLearner {
                node: 3,
                addr: ids[2].1.to_string(),
                wait: false,
            },
        )
        .await
        .unwrap();
        let st = nodes[2].wait_dead();
        assert!(!st.success(), "{point}: node 3 ended with {st}");
        // The next start finishes the install and catches up.
        nodes[2].start_with(&often, None);
        wait_up(ids[2].1).await;
        let last = c.submit(mkdir("/s/after".into())).await.unwrap();
        converge(&ids, last, &format!("{point}: no convergence")).await;
        for n in &mut nodes {
            n.stop();
        }
        let mut digests = Vec::new();
        for n in &nodes {
            let t = treelog::Treelog::open(
                &n.data,
                treelog::Options {
                    role: treelog::replication::NodeRole::Consensus(
                        treelog::replication::ConsensusNode { node_id: n.id },
                    ),
                    ..Default::default()
                },
            )
            .unwrap();
            let d = treelog::admin::index_summary(t.store()).unwrap().digest;
            digests.push((t.committed_seq(), d));
        }
        assert!(
            digests.iter().all(|d| *d == digests[0]),
            "{point}: {digests:?}"
        );
        let log = std::fs::read_to_string(&nodes[2].log).unwrap();
        // Killed after the mark: the next open finished that install.
        assert!(
            log.contains("finishing a snapshot's install"),
            "{point}: the open did not finish the install"
        );
    }
}
