//! A rolling upgrade (docs/OPERATIONS.md, "Upgrading"): a three-node Raft
//! cluster of the previous release's binary (`TREELOG_PREVIOUS_BINARY`)
//! under a load of creates is upgraded one node at a time, followers first
//! and the leader last: each node stopped with SIGTERM and started again as
//! this build on the same data directory and ports, and waited for
//! (`/readyz`, then caught up) before the next. Nothing acknowledged is
//! lost: every acknowledged create is found on every node at the end. The
//! cluster's feature level (`treelog_raft_cluster_feature_level`) stays 1
//! while any member runs the previous release and becomes this release's
//! once the last one is upgraded.
//!
//! Without `TREELOG_PREVIOUS_BINARY` the test is skipped, saying so;
//! `TREELOG_REQUIRE_PREVIOUS=1` makes that a failure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treelog::error::Error;
use treelog::Command;
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};
use treelog_proto::FEATURE_LEVEL;
use treelog_testkit::process::free_addr;
use treelog_testkit::{cli, http, poll};

const NEW: &str = env!("CARGO_BIN_EXE_treelog");

/// The previous release's binary, or `None` (skipped) when not given.
fn previous_binary() -> Option<String> {
    match std::env::var("TREELOG_PREVIOUS_BINARY") {
        Ok(p) if !p.is_empty() => {
            assert!(
                Path::new(&p).is_file(),
                "TREELOG_PREVIOUS_BINARY={p} is not a file"
            );
            // Both builds may share a target directory: make sure the
            // new binary is not the previous one.
            assert!(
                std::fs::read(&p).unwrap() != std::fs::read(NEW).unwrap(),
                "TREELOG_PREVIOUS_BINARY={p} is this build's binary"
            );
            Some(p)
        }
        _ => {
            let why = "TREELOG_PREVIOUS_BINARY is not set (the previous release's `treelog`, \
                       built by .ci/run)";
            if std::env::var("TREELOG_REQUIRE_PREVIOUS").as_deref() == Ok("1") {
                panic!("TREELOG_REQUIRE_PREVIOUS=1 but {why}");
            }
            eprintln!("SKIP: {why}");
            None
        }
    }
}

struct Node {
    id: u64,
    data: PathBuf,
    rpc: SocketAddr,
    http: SocketAddr,
    log: PathBuf,
    bin: String,
    child: Option<Child>,
}

impl Node {
    fn new(dir: &Path, id: u64, bin: &str) -> Node {
        Node {
            id,
            data: dir.join(format!("node{id}")),
            rpc: free_addr(),
            http: free_addr(),
            log: dir.join(format!("node{id}.log")),
            bin: bin.to_owned(),
            child: None,
        }
    }

    fn is_new(&self) -> bool {
        self.bin == NEW
    }

    fn start(&mut self) {
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
        let args = ["serve", "--listen", &rpc, "--http", &http, "--node-id", &id];
        let mut cmd = cli::command(&self.bin, &self.data, &args);
        cmd.stdout(Stdio::null()).stderr(log);
        self.child = Some(cmd.spawn().expect("start treelog serve"));
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
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn connect(addr: SocketAddr, follow_leader: bool) -> Option<Client> {
    Client::connect(
        addr,
        ClientOptions {
            follow_leader,
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await
    .ok()
}

async fn cluster(addr: SocketAddr, req: ClusterRequest) -> treelog::Result<ClusterStatus> {
    let c = connect(addr, true)
        .await
        .ok_or_else(|| Error::Busy(format!("{addr} is down")))?;
    match c.call(RequestBody::Cluster(req)).await? {
        ResponseBody::Cluster(s) => Ok(s),
        other => panic!("unexpected {other:?}"),
    }
}

/// Polls `f` every 20 ms until it is `Some`, for at most 60 s.
async fn within_a_minute<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node the live nodes agree leads, and its status.
async fn leader(nodes: &[(u64, SocketAddr)]) -> (u64, ClusterStatus) {
    within_a_minute("a leader", || async {
        for (id, addr) in nodes {
            if let Ok(s) = cluster(*addr, ClusterRequest::Status).await {
                if s.state == "leader" {
                    return Some((*id, s));
                }
            }
        }
        None
    })
    .await
}

/// The node's `treelog_raft_cluster_feature_level`, once it has one.
async fn feature_level(http_addr: SocketAddr) -> Option<i64> {
    let (code, body) = http::try_get(http_addr, "/metrics").await?;
    if code != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix("treelog_raft_cluster_feature_level "))
        .and_then(|v| v.trim().parse().ok())
}

/// Creates `/up/w{i}-{n}` one after another through whichever node leads,
/// keeping the paths acknowledged; a failed create (NotLeader while a
/// node restarts, OutcomeUnknown) is not retried under the same name.
async fn writer(
    i: usize,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
) {
    let mut n = 0u64;
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        if client.is_none() {
            for a in &addrs {
                client = connect(*a, true).await;
                if client.is_some() {
                    break;
                }
            }
        }
        let Some(c) = &client else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        n += 1;
        let path = format!("/up/w{i}-{n}");
        let r = c
            .submit(Command::Create {
                path: path.clone().into(),
                parents: false,
                mode: 0o644,
                owner: String::new(),
                group: String::new(),
                block_size: 1 << 20,
            })
            .await;
        match r {
            Ok(_) => acked.lock().unwrap().push(path),
            Err(_) => {
                client = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_under_load_loses_nothing_and_raises_the_feature_level_last() {
    let Some(prev) = previous_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(dir.path(), id, &prev)).collect();
    for n in &mut nodes {
        n.start();
    }
    let ids: Vec<(u64, SocketAddr)> = nodes.iter().map(|n| (n.id, n.rpc)).collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.rpc).collect();
    for a in &addrs {
        within_a_minute("the node answers", || async {
            cluster(*a, ClusterRequest::Status).await.ok()
        })
        .await;
    }
    cluster(addrs[0], ClusterRequest::Init).await.unwrap();
    leader(&ids[..1]).await;
    for n in &nodes[1..] {
        let req = ClusterRequest::AddLearner {
            node: n.id,
            addr: n.rpc.to_string(),
            wait: true,
        };
        cluster(addrs[0], req).await.unwrap();
    }
    cluster(addrs[0], ClusterRequest::Promote { nodes: vec![2, 3] })
        .await
        .unwrap();
    let c = connect(addrs[0], true).await.unwrap();
    c.submit(Command::Mkdir {
        path: "/up".into(),
        parents: false,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..2)
        .map(|i| tokio::spawn(writer(i, addrs.clone(), stop.clone(), acked.clone())))
        .collect();
    let acks = || acked.lock().unwrap().len();

    for step in 1..=3 {
        // Writes go on before each step.
        let before = acks();
        poll::eventually(60, "creates are acknowledged", || acks() >= before + 20).await;
        // A follower still on the previous release; the leader once it is
        // the only one left.
        let (l, lead) = leader(&ids).await;
        let old: Vec<usize> = (0..3).filter(|&i| !nodes[i].is_new()).collect();
        let i = old
            .iter()
            .copied()
            .find(|&i| nodes[i].id != l)
            .unwrap_or(old[0]);
        let mut committed = lead.committed.unwrap_or(0);
        if step == 3 && nodes[i].id == l {
            // As OPERATIONS.md advises: hand leadership to an upgraded
            // node first. The previous release's node then follows a new
            // leader, whose messages carry a trailer it must ignore: it
            // goes on applying, and the leader hears it at level 1.
            let to = nodes.iter().find(|n| n.is_new()).unwrap().id;
            cluster(nodes[i].rpc, ClusterRequest::TransferLeader { node: to })
                .await
                .unwrap();
            within_a_minute("the upgraded node leads", || async {
                let s = cluster(addrs[(to - 1) as usize], ClusterRequest::Status)
                    .await
                    .ok()?;
                (s.state == "leader").then_some(())
            })
            .await;
            let before = acks();
            poll::eventually(60, "creates under the new leader", || acks() >= before + 20).await;
            let (_, lead) = leader(&ids).await;
            committed = lead.committed.unwrap_or(0);
            let old_rpc = nodes[i].rpc;
            within_a_minute("the old node applies the new leader's entries", || async {
                let s = cluster(old_rpc, ClusterRequest::Status).await.ok()?;
                (s.applied? >= committed).then_some(())
            })
            .await;
            for n in nodes.iter().filter(|n| n.is_new()) {
                let got =
                    within_a_minute("the feature level metric", || feature_level(n.http)).await;
                assert_eq!(got, 1, "node {} with node {} old", n.id, nodes[i].id);
            }
        }
        eprintln!(
            "step {step}: upgrading node {} ({})",
            nodes[i].id,
            if nodes[i].id == l {
                "the leader, after it handed leadership over"
            } else {
                "a follower"
            }
        );
        nodes[i].stop();
        if step == 3 {
            // The last node of the previous release is down; a new one
            // leads, and a member it has not heard from counts as 1.
            let others: Vec<_> = ids
                .iter()
                .copied()
                .filter(|(id, _)| *id != nodes[i].id)
                .collect();
            leader(&others).await;
            for n in nodes.iter().filter(|n| n.is_new()) {
                let got =
                    within_a_minute("the feature level metric", || feature_level(n.http)).await;
                assert_eq!(got, 1, "node {} with node {} down", n.id, nodes[i].id);
            }
        }
        nodes[i].bin = NEW.to_owned();
        nodes[i].start();
        let http_addr = nodes[i].http;
        within_a_minute("/readyz", || async {
            (http::try_get(http_addr, "/readyz").await?.0 == 200).then_some(())
        })
        .await;
        let rpc = nodes[i].rpc;
        within_a_minute("the upgraded node catches up", || async {
            let s = cluster(rpc, ClusterRequest::Status).await.ok()?;
            (s.applied? >= committed).then_some(())
        })
        .await;
        if step < 3 {
            // A member of the previous release remains: every upgraded
            // node says the cluster is at level 1.
            for n in nodes.iter().filter(|n| n.is_new()) {
                let got =
                    within_a_minute("the feature level metric", || feature_level(n.http)).await;
                assert_eq!(got, 1, "step {step}: node {}", n.id);
            }
        }
    }

    // Every node is this release: the level rises to it, on every node.
    for n in &nodes {
        within_a_minute("the cluster's feature level rises", || async {
            (feature_level(n.http).await? == i64::from(FEATURE_LEVEL)).then_some(())
        })
        .await;
    }
    let before = acks();
    poll::eventually(60, "creates go on after the upgrade", || {
        acks() >= before + 20
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    // Nothing acknowledged is lost, on any node: once all have applied
    // what the leader committed, each finds every acknowledged path.
    let (_, lead) = leader(&ids).await;
    let committed = lead.committed.unwrap_or(0);
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 80, "{} creates acknowledged", acked.len());
    for n in &nodes {
        let rpc = n.rpc;
        within_a_minute("every node applies the leader's commits", || async {
            let s = cluster(rpc, ClusterRequest::Status).await.ok()?;
            (s.applied? >= committed).then_some(())
        })
        .await;
        let c = connect(rpc, false).await.expect("connect");
        for p in &acked {
            let got = c.stat(p).await;
            assert!(got.is_ok(), "node {}: {p}: {got:?}", n.id);
        }
    }
    for n in &mut nodes {
        n.stop();
    }
}
