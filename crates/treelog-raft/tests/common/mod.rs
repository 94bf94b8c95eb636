//! The in-process cluster the Raft tests share: nodes on loopback, each a
//! real server with its own store, the messages between them passed
//! through one [`Faults`] (the tests' partitions).

// Each test binary uses its own part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use treelog::error::ErrorKind;
use treelog::{Command, Durability};
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};
use treelog_raft::{ClusterConfig, ClusterHandle, Faults, NodeConfig};
use treelog_testkit::poll;
use treelog_testkit_server::server;

/// Whether `localhost` resolves to a loopback address here; a test of
/// host names is skipped (said so) when it does not, unless
/// `TREELOG_REQUIRE_LOCALHOST=1` makes that a failure.
/// Runs a test's body, failing it if it has not ended within 5 minutes
/// (a hang reported as one, not a stuck test run).
pub(crate) async fn bounded<T>(body: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(300), body)
        .await
        .expect("the test did not end within 300 s")
}

pub(crate) fn localhost_resolves() -> bool {
    use std::net::ToSocketAddrs;
    let ok = ("localhost", 1)
        .to_socket_addrs()
        .map(|mut a| a.any(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("TREELOG_REQUIRE_LOCALHOST").as_deref() != Ok("1"),
            "localhost does not resolve to a loopback address (TREELOG_REQUIRE_LOCALHOST=1)"
        );
        eprintln!("SKIPPED: localhost does not resolve to a loopback address here");
    }
    ok
}

pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) dir: PathBuf,
    pub(crate) rpc: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) handle: Option<ClusterHandle>,
    /// The sockets bound when the cluster was made, kept for the node's
    /// first start (another test may take a port let go of meanwhile).
    listeners: Option<treelog_server::Listeners>,
}

pub(crate) struct Cluster {
    _tmp: tempfile::TempDir,
    pub(crate) nodes: Vec<Node>,
    pub(crate) faults: Arc<Faults>,
    tweak: fn(&mut NodeConfig),
    /// Nodes advertise `localhost:PORT` instead of `127.0.0.1:PORT`.
    pub(crate) named: bool,
}

pub(crate) fn default_tweak(n: &mut NodeConfig) {
    n.heartbeat_ms = 50;
}

impl Cluster {
    /// `n` nodes, none started.
    pub(crate) fn new(n: u64, tweak: fn(&mut NodeConfig)) -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let tmp = tempfile::tempdir().unwrap();
        let nodes = (1..=n)
            .map(|id| {
                let l = treelog_server::Listeners::bind(
                    "127.0.0.1:0".parse().unwrap(),
                    "127.0.0.1:0".parse().unwrap(),
                )
                .unwrap();
                let b = l.bound().unwrap();
                Node {
                    id,
                    dir: tmp.path().join(format!("node{id}")),
                    rpc: b.rpc,
                    http: b.http,
                    handle: None,
                    listeners: Some(l),
                }
            })
            .collect();
        Cluster {
            _tmp: tmp,
            nodes,
            faults: Faults::new(),
            tweak,
            named: false,
        }
    }

    pub(crate) fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The address node `id` advertises (what the others dial).
    pub(crate) fn addr(&self, id: u64) -> String {
        let rpc = self.node(id).rpc;
        if self.named {
            format!("localhost:{}", rpc.port())
        } else {
            rpc.to_string()
        }
    }

    pub(crate) fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    pub(crate) async fn start(&mut self, id: u64) {
        let faults = self.faults.clone();
        let tweak = self.tweak;
        let addr = self.addr(id);
        let n = &mut self.nodes[(id - 1) as usize];
        assert!(n.handle.is_none());
        let mut server = server::config(&n.dir);
        server.store = server.store.durability(Durability::None);
        // Linearizable reads wait for their read index this long: generous,
        // for a loaded machine (and the tests' delayed messages).
        server.store.min_seq_wait = Duration::from_secs(30);
        let mut node = NodeConfig::new(id, addr);
        node.durability = Durability::None;
        node.faults = Some(faults);
        tweak(&mut node);
        let listeners = match n.listeners.take() {
            Some(l) => l,
            None => treelog_server::Listeners::bind(n.rpc, n.http).unwrap(),
        };
        n.handle = Some(
            treelog_raft::start_on(ClusterConfig { server, node }, listeners)
                .await
                .expect("start the node"),
        );
    }

    pub(crate) async fn stop(&mut self, id: u64) {
        let h = self.nodes[(id - 1) as usize].handle.take().unwrap();
        h.shutdown().await.unwrap();
    }

    pub(crate) async fn client(&self, id: u64) -> Client {
        Client::connect(
            self.node(id).rpc,
            ClientOptions {
                follow_leader: true,
                // An election after a restart can outlast the default on a
                // loaded 2-core host running the whole suite.
                leader_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await
        .unwrap()
    }

    pub(crate) async fn admin(
        &self,
        id: u64,
        req: ClusterRequest,
    ) -> treelog::Result<ClusterStatus> {
        match self
            .client(id)
            .await
            .call(RequestBody::Cluster(req))
            .await?
        {
            ResponseBody::Cluster(s) => Ok(s),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Node 1 makes a cluster; the others join as learners, then voters.
    pub(crate) async fn form(&mut self) {
        for id in self.ids() {
            self.start(id).await;
        }
        self.admin(1, ClusterRequest::Init).await.unwrap();
        self.wait_leader(&[1]).await;
        for id in self.ids().into_iter().skip(1) {
            let addr = self.addr(id);
            self.admin(
                1,
                ClusterRequest::AddLearner {
                    node: id,
                    addr,
                    wait: true,
                },
            )
            .await
            .unwrap();
        }
        let others: Vec<u64> = self.ids().into_iter().skip(1).collect();
        self.admin(1, ClusterRequest::Promote { nodes: others })
            .await
            .unwrap();
    }

    /// Waits until one of `among` leads and the others running agree.
    pub(crate) async fn wait_leader(&self, among: &[u64]) -> u64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            for &id in among {
                if self.node(id).handle.is_none() {
                    continue;
                }
                if let Ok(s) = self.admin(id, ClusterRequest::Status).await {
                    if s.state == "leader" {
                        return id;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no leader among {among:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn store(&self, id: u64) -> Arc<treelog::Treelog> {
        self.node(id).handle.as_ref().unwrap().node.store().clone()
    }

    /// Waits until every running node has applied the same sequence, at
    /// least `seq` (nothing is written meanwhile; Raft's own entries may
    /// follow `seq`); then their index digests there must be equal.
    pub(crate) async fn converge(&self, seq: u64) -> String {
        let stores: Vec<_> = self
            .nodes
            .iter()
            .filter(|n| n.handle.is_some())
            .map(|n| (n.id, self.store(n.id)))
            .collect();
        poll::eventually(30, &format!("every node applies {seq} and agrees"), || {
            let at: Vec<u64> = stores.iter().map(|(_, t)| t.committed_seq()).collect();
            at[0] >= seq && at.iter().all(|a| *a == at[0])
        })
        .await;
        let mut digests = Vec::new();
        for (id, t) in &stores {
            let d = treelog::admin::index_summary(t.store()).unwrap().digest;
            digests.push((*id, d));
        }
        for (id, d) in &digests {
            assert_eq!(
                d, &digests[0].1,
                "node {id}'s index differs from node {}'s",
                digests[0].0
            );
        }
        digests[0].1.clone()
    }
}

/// Submits `cmd` (acknowledged: its sequence), riding out a leader change
/// as a client that follows the leader must: `NotLeader` means the command
/// was not applied, so it is sent again once a leader is known. Elections
/// come when a loaded machine delays heartbeats; they are not what these
/// tests test.
pub(crate) async fn submit(cl: &Client, cmd: Command) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match cl.submit(cmd.clone()).await {
            Ok(seq) => return seq,
            Err(e)
                if e.kind() == ErrorKind::NotLeader && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{}: {e}", cmd.name()),
        }
    }
}
