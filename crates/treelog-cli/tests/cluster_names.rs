//! A three-node Raft cluster of real `treelog serve --node-id` processes
//! whose members are named `localhost:PORT` (`--advertise`, `cluster
//! add-learner`), and a replica of it started with `--replica-of
//! localhost:PORT`: the names are what the membership holds and what the
//! nodes dial; `/readyz` says whether a node is a member with a leader;
//! `/metrics` carries `treelog_build_info`. Skipped (said so) where
//! `localhost` does not resolve to loopback, unless
//! `TREELOG_REQUIRE_LOCALHOST=1`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use treelog::ReadAt;
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};
use treelog_testkit::cli;
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::process::free_addr;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn localhost_resolves() -> bool {
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

/// A `treelog serve` process, killed when dropped.
struct Proc {
    rpc: SocketAddr,
    http: SocketAddr,
    child: Child,
}

impl Proc {
    /// `serve` in `dir/name`, its RPC port `rpc`, with `extra` arguments.
    fn start(dir: &Path, name: &str, rpc: SocketAddr, extra: &[String]) -> Proc {
        let http = free_addr();
        let data: PathBuf = dir.join(name);
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let (r, h) = (rpc.to_string(), http.to_string());
        let mut args = vec!["serve", "--listen", &r, "--http", &h];
        args.extend(extra.iter().map(String::as_str));
        let child = cli::command(BIN, &data, &args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start treelog serve");
        Proc { rpc, http, child }
    }

    /// `localhost:PORT` of its RPC port.
    fn name(&self) -> String {
        format!("localhost:{}", self.rpc.port())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on `addr`, `None` while the port does not accept.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::net::TcpStream::connect(addr).await.ok()?;
    Some(treelog_testkit::http::get(addr, path).await)
}

/// Waits until `GET path` on `addr` answers `code`; its body.
async fn wait_http(addr: SocketAddr, path: &str, code: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = get(addr, path).await;
        if let Some((c, body)) = &got {
            if *c == code {
                return body.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{addr}{path} never answered {code}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status(addr: SocketAddr) -> Option<ClusterStatus> {
    let c = Client::connect(addr, ClientOptions::default()).await.ok()?;
    match c.call(RequestBody::Cluster(ClusterRequest::Status)).await {
        Ok(ResponseBody::Cluster(s)) => Some(s),
        _ => None,
    }
}

fn treelog(args: &[&str]) -> cli::Ran {
    // The client commands take no data directory of their own.
    let none = Path::new("/nonexistent-treelog-data");
    cli::run(BIN, none, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_nodes_named_localhost_and_a_replica_of_one_by_name() {
    if !localhost_resolves() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Proc> = Vec::new();
    for id in 1..=3u64 {
        // It advertises the name of its own port.
        let rpc = free_addr();
        let name = format!("localhost:{}", rpc.port());
        let p = Proc::start(
            tmp.path(),
            &format!("node{id}"),
            rpc,
            &[
                "--node-id".into(),
                id.to_string(),
                "--advertise".into(),
                name,
                "--raft-heartbeat-ms".into(),
                "100".into(),
            ],
        );
        nodes.push(p);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &nodes {
        while status(n.rpc).await.is_none() {
            assert!(Instant::now() < deadline, "{} did not come up", n.rpc);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Up, but no cluster's member yet: not ready, and the body says why.
    let body = wait_http(nodes[1].http, "/readyz", 503).await;
    assert!(body.contains("not a member"), "{body}");
    let server = nodes[0].rpc.to_string();
    let r = treelog(&["--server", &server, "cluster", "init"]);
    assert_eq!(r.code(), 0, "cluster init: {}", r.stderr);
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let id = (i + 1).to_string();
        let r = treelog(&[
            "--server",
            &server,
            "cluster",
            "add-learner",
            &id,
            &n.name(),
        ]);
        assert_eq!(r.code(), 0, "add-learner {id}: {}", r.stderr);
    }
    let r = treelog(&["--server", &server, "cluster", "promote", "2", "3"]);
    assert_eq!(r.code(), 0, "promote: {}", r.stderr);
    // A name that is not host:port is refused before anything is asked.
    let r = treelog(&[
        "--server",
        &server,
        "cluster",
        "add-learner",
        "4",
        "localhost",
    ]);
    assert_ne!(r.code(), 0);
    assert!(r.stderr.contains("localhost"), "{}", r.stderr);
    // The membership holds the names, once node 3 has applied it (the
    // promotion is acknowledged when the leader's majority has it).
    let mut want: Vec<String> = nodes.iter().map(Proc::name).collect();
    want.sort();
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let st = status(nodes[2].rpc).await.unwrap();
        let mut addrs: Vec<String> = st.members.iter().map(|m| m.addr.clone()).collect();
        addrs.sort();
        if addrs == want {
            break st;
        }
        assert!(Instant::now() < deadline, "node 3's membership: {addrs:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Every node ready: a member, a leader known, caught up.
    for n in &nodes {
        assert_eq!(wait_http(n.http, "/readyz", 200).await, "ready\n");
    }
    // Written through a follower: it names the leader by name, and the
    // client goes there.
    let leader = st.leader.expect("a leader");
    let follower = nodes
        .iter()
        .find(|n| Some(n.name()) != st.leader_addr)
        .unwrap();
    assert_ne!(Some(follower.name()), st.leader_addr, "leader {leader}");
    let c = Client::connect(
        follower.rpc,
        ClientOptions {
            follow_leader: true,
            leader_wait: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.submit(mkdir("/named")).await.unwrap();
    let mut last = 0;
    for i in 0..20 {
        last = c.submit(create(&format!("/named/f{i}"))).await.unwrap();
    }
    let r = c.stat_at("/named/f19", ReadAt::Linearizable).await.unwrap();
    assert!(r.seq >= last);
    // A replica of the leader, by name.
    let leader_name = st.leader_addr.clone().unwrap();
    let replica = Proc::start(
        tmp.path(),
        "replica",
        free_addr(),
        &["--replica-of".into(), leader_name],
    );
    assert_eq!(wait_http(replica.http, "/readyz", 200).await, "ready\n");
    let rc = Client::connect(replica.rpc, ClientOptions::default())
        .await
        .unwrap();
    let r = rc
        .stat_at("/named/f19", ReadAt::AtLeast(last))
        .await
        .unwrap();
    assert!(r.seq >= last);
    // A --replica-of that is not host:port is a usage error.
    let bad = cli::run(
        BIN,
        &tmp.path().join("bad"),
        &["serve", "--replica-of", "localhost"],
    );
    assert_eq!(bad.code(), 2, "{}", bad.stderr);
    // What the build is.
    let (code, metrics) = get(nodes[0].http, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("treelog_build_info{"))
        .unwrap_or_else(|| panic!("no treelog_build_info"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(
        line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    // Built from this checkout: its commit (or `unknown` outside git).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(h) => assert!(line.contains(&format!("commit=\"{h}\"")), "{line} at {h}"),
        None => assert!(line.contains("commit=\"unknown\""), "{line}"),
    }
}
