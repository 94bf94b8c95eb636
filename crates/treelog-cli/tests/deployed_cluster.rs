//! A three-node cluster deployed as an operator deploys one: nodes named
//! by host names (in /etc/hosts), each started from its own config file
//! and running as a user of its own, clients given the endpoint list.
//! Under a load of creates, the leader is killed with SIGKILL, paused with
//! SIGSTOP, and cut off from its peers by iptables rules on loopback
//! (removed afterwards). Checked: the clients' writes go on after each
//! election and no call outlives its deadline by more than a scheduling
//! margin; once an election timeout has passed, at most one node reports
//! itself leader (the cut-off one steps down); `treelog stat
//! --consistency linearizable` never answers with a state older than an
//! acknowledged write; every acknowledged create is on every node at the
//! end.
//!
//! It needs root (users, /etc/hosts, iptables): without them it says why
//! and passes, unless TREELOG_REQUIRE_IPTABLES=1 (CI as root sets it).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use treelog::error::ErrorKind;
use treelog::{Command, ReadAt};
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};
use treelog_testkit::process::{free_addr, ServeProcess};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");
/// Raft's heartbeat; a follower calls an election after 3–6 of them.
const HEARTBEAT_MS: u64 = 100;
/// The deadline of every request the load makes.
const DEADLINE: Duration = Duration::from_secs(3);
/// What a loaded 2-core machine may add to a deadline before the caller
/// sees its error (timers, scheduling): a bound on hanging, not a latency.
const MARGIN: Duration = Duration::from_secs(5);
/// The first of the three users the nodes run as.
const FIRST_UID: u32 = 47_001;

/// Why this machine cannot run the test, if it cannot.
fn missing() -> Option<String> {
    // SAFETY: a query of the process's own user.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    let ok = |prog: &str, args: &[&str]| {
        Process::new(prog)
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !ok("iptables", &["-w", "-S", "OUTPUT"]) {
        return Some("iptables does not work here".into());
    }
    if !ok("setpriv", &["--version"]) {
        return Some("no setpriv (util-linux)".into());
    }
    if std::fs::OpenOptions::new()
        .append(true)
        .open("/etc/hosts")
        .is_err()
    {
        return Some("/etc/hosts is not writable".into());
    }
    None
}

/// Lines added to /etc/hosts, taken out again when dropped.
struct Hosts {
    added: String,
}

impl Hosts {
    fn add(names: &[String]) -> Hosts {
        let mut added = String::new();
        for n in names {
            writeln!(added, "127.0.0.1 {n}").unwrap();
        }
        let mut all = std::fs::read_to_string("/etc/hosts").unwrap();
        if !all.ends_with('\n') && !all.is_empty() {
            all.push('\n');
        }
        all.push_str(&added);
        std::fs::write("/etc/hosts", all).unwrap();
        Hosts { added }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Ok(all) = std::fs::read_to_string("/etc/hosts") {
            let _ = std::fs::write("/etc/hosts", all.replacen(&self.added, "", 1));
        }
    }
}

/// iptables rules in the OUTPUT chain (loopback traffic passes it once),
/// deleted when dropped.
#[derive(Default)]
struct Firewall {
    rules: Vec<Vec<String>>,
}

impl Firewall {
    fn drop_rule(&mut self, spec: &[String]) {
        let mut args = vec!["-w".to_owned(), "-I".into(), "OUTPUT".into()];
        args.extend(spec.iter().cloned());
        args.extend(["-j".into(), "DROP".into()]);
        let out = Process::new("iptables").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "iptables {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.rules.push(spec.to_vec());
    }

    /// Cuts the node running as `uid` listening on `port` off from the
    /// others (uids and ports): nothing either way between them. Clients
    /// (this test's user) still reach every node.
    fn partition(&mut self, uid: u32, port: u16, others: &[(u32, u16)]) {
        for (ouid, oport) in others {
            for (from, to) in [(uid, *oport), (*ouid, port)] {
                let spec = [
                    "-p",
                    "tcp",
                    "-m",
                    "owner",
                    "--uid-owner",
                    &from.to_string(),
                    "--dport",
                    &to.to_string(),
                ];
                self.drop_rule(&spec.map(str::to_owned));
            }
        }
    }

    fn heal(&mut self) {
        for spec in self.rules.drain(..) {
            let mut args = vec!["-w".to_owned(), "-D".into(), "OUTPUT".into()];
            args.extend(spec);
            args.extend(["-j".into(), "DROP".into()]);
            let _ = Process::new("iptables").args(&args).output();
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        self.heal();
    }
}

struct Node {
    id: u64,
    uid: u32,
    name: String,
    rpc: SocketAddr,
    proc: ServeProcess,
}

impl Node {
    /// `host:port`, as clients and peers name it.
    fn endpoint(&self) -> String {
        format!("{}:{}", self.name, self.rpc.port())
    }
}

/// Node `id`'s config file in `dir`, its data directory owned by its user.
fn node(dir: &Path, id: u64, suffix: &str) -> Node {
    let uid = FIRST_UID + id as u32 - 1;
    let name = format!("n{id}-{suffix}.treelog.test");
    let data = dir.join(format!("node{id}"));
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(uid), Some(uid)).unwrap();
    let (rpc, http) = (free_addr(), free_addr());
    let config = dir.join(format!("node{id}.toml"));
    std::fs::write(
        &config,
        format!(
            "# node {id} of the test's cluster\n\
             data = {data:?}\n\
             listen = \"{rpc}\"\n\
             http = \"{http}\"\n\
             node-id = {id}\n\
             advertise = \"{name}:{port}\"\n\
             raft-heartbeat-ms = {HEARTBEAT_MS}\n",
            port = rpc.port(),
        ),
    )
    .unwrap();
    let args = vec![
        "serve".to_owned(),
        "--config".into(),
        config.to_str().unwrap().into(),
    ];
    let uid_s = uid.to_string();
    let proc = ServeProcess::new(BIN, args, &dir.join(format!("node{id}.log"))).wrapped(&[
        "setpriv",
        "--reuid",
        &uid_s,
        "--regid",
        &uid_s,
        "--clear-groups",
    ]);
    Node {
        id,
        uid,
        name,
        rpc,
        proc,
    }
}

fn options() -> ClientOptions {
    ClientOptions {
        follow_leader: true,
        request_timeout: DEADLINE,
        leader_wait: DEADLINE,
        connect_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_millis(500),
        ping_timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

async fn status(endpoint: &str) -> Option<ClusterStatus> {
    let c = Client::connect_to(
        endpoint,
        ClientOptions {
            request_timeout: Duration::from_secs(1),
            ..Default::default()
        },
    )
    .await
    .ok()?;
    match c.call(RequestBody::Cluster(ClusterRequest::Status)).await {
        Ok(ResponseBody::Cluster(s)) => Some(s),
        _ => None,
    }
}

async fn admin(endpoint: &str, req: ClusterRequest) {
    let c = Client::connect_to(endpoint, ClientOptions::default())
        .await
        .unwrap();
    match c.call(RequestBody::Cluster(req)).await {
        Ok(ResponseBody::Cluster(_)) => {}
        other => panic!("cluster request to {endpoint}: {other:?}"),
    }
}

/// The ids of the nodes among `nodes` that report themselves leader.
async fn leaders(nodes: &[&Node]) -> Vec<u64> {
    let mut out = Vec::new();
    for n in nodes {
        if let Some(s) = status(&n.endpoint()).await {
            if s.state == "leader" {
                out.push(n.id);
            }
        }
    }
    out
}

/// Waits (a failure guard of `secs`) until exactly one of `nodes` leads;
/// its id.
async fn one_leader(nodes: &[&Node], secs: u64, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let l = leaders(nodes).await;
        if l.len() == 1 {
            return l[0];
        }
        assert!(Instant::now() < deadline, "{what}: leaders {l:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the load saw.
#[derive(Default)]
struct Load {
    acked: Mutex<Vec<String>>,
    count: AtomicU64,
    slowest: Mutex<Duration>,
    unknown: AtomicU64,
}

/// One writer: creates `/d/wI-K` one after another through the endpoint
/// list, recording what was acknowledged and the slowest call.
async fn writer(i: usize, endpoints: String, load: Arc<Load>, stop: Arc<AtomicBool>) {
    let c = loop {
        match Client::connect_to(&endpoints, options()).await {
            Ok(c) => break c,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut k = 0u64;
    while !stop.load(Ordering::Acquire) {
        let path = format!("/d/w{i}-{k}");
        k += 1;
        let start = Instant::now();
        let r = c
            .submit(Command::Create {
                path: path.clone().into(),
                parents: false,
                mode: 0o644,
                owner: String::new(),
                group: String::new(),
                block_size: 4096,
            })
            .await;
        let took = start.elapsed();
        {
            let mut s = load.slowest.lock().unwrap();
            *s = (*s).max(took);
        }
        match r {
            Ok(_) => {
                load.acked.lock().unwrap().push(path);
                load.count.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
                load.unknown.fetch_add(1, Ordering::Relaxed);
            }
            // Not applied (no leader within the deadline, refused): the
            // next path, after a breath.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Waits until the load has had `n` more creates acknowledged.
async fn writes_go_on(load: &Load, n: u64, what: &str) {
    let from = load.count.load(Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(60);
    while load.count.load(Ordering::Acquire) < from + n {
        assert!(Instant::now() < deadline, "writes stopped: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `treelog --server ENDPOINT stat --consistency linearizable PATH`: its
/// exit code and output.
fn cli_stat(endpoint: &str, path: &str) -> (i32, String) {
    let out = Process::new(BIN)
        .args([
            "--server",
            endpoint,
            "--timeout",
            "3",
            "stat",
            "--consistency",
            "linearizable",
            path,
        ])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The newest acknowledged create, read linearizably through `endpoint`:
/// found, or refused — never "not found" (a state older than the write).
fn never_stale(load: &Load, endpoint: &str, must_answer: bool) {
    let Some(last) = load.acked.lock().unwrap().last().cloned() else {
        return;
    };
    let (code, out) = cli_stat(endpoint, &last);
    assert_ne!(
        code, 3,
        "{endpoint} read {last} as missing after its ack: {out}"
    );
    if must_answer {
        assert_eq!(code, 0, "stat {last} at {endpoint}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_on_host_names_rides_out_kill_pause_and_partition_of_its_leader() {
    if let Some(why) = missing() {
        assert!(
            std::env::var("TREELOG_REQUIRE_IPTABLES").as_deref() != Ok("1"),
            "TREELOG_REQUIRE_IPTABLES=1 but {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The nodes' users must reach their config and data.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let suffix = std::process::id().to_string();
    let mut nodes: Vec<Node> = (1..=3).map(|id| node(dir.path(), id, &suffix)).collect();
    let _hosts = Hosts::add(&nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>());
    for n in &mut nodes {
        n.proc.start();
    }
    let endpoints = nodes
        .iter()
        .map(Node::endpoint)
        .collect::<Vec<_>>()
        .join(",");
    // Form the cluster by names.
    let first = nodes[0].endpoint();
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &nodes {
        while status(&n.endpoint()).await.is_none() {
            assert!(
                Instant::now() < deadline,
                "node {} did not come up: {}",
                n.id,
                n.proc.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    admin(&first, ClusterRequest::Init).await;
    one_leader(&[&nodes[0]], 30, "node 1 leads its cluster of one").await;
    for n in &nodes[1..] {
        admin(
            &first,
            ClusterRequest::AddLearner {
                node: n.id,
                addr: n.endpoint(),
                wait: true,
            },
        )
        .await;
    }
    admin(&first, ClusterRequest::Promote { nodes: vec![2, 3] }).await;
    let c = Client::connect_to(&endpoints, options()).await.unwrap();
    c.submit(Command::Mkdir {
        path: "/d".into(),
        parents: true,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();

    let load = Arc::new(Load::default());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|i| tokio::spawn(writer(i, endpoints.clone(), load.clone(), stop.clone())))
        .collect();
    writes_go_on(&load, 20, "before any fault").await;
    let all: Vec<usize> = vec![0, 1, 2];

    // 1. SIGKILL of the leader, and its restart.
    let l = one_leader(&nodes.iter().collect::<Vec<_>>(), 30, "a leader").await;
    let li = (l - 1) as usize;
    nodes[li].proc.kill();
    let rest: Vec<&Node> = all
        .iter()
        .filter(|i| **i != li)
        .map(|i| &nodes[*i])
        .collect();
    one_leader(&rest, 30, "a leader after the kill").await;
    writes_go_on(&load, 20, "after the leader was killed").await;
    for n in &rest {
        never_stale(&load, &n.endpoint(), true);
    }
    nodes[li].proc.start();

    // 2. SIGSTOP of the leader: the others elect, writes go on; resumed,
    // it steps down.
    let l = one_leader(&nodes.iter().collect::<Vec<_>>(), 30, "a leader").await;
    let li = (l - 1) as usize;
    nodes[li].proc.pause();
    let rest: Vec<&Node> = all
        .iter()
        .filter(|i| **i != li)
        .map(|i| &nodes[*i])
        .collect();
    one_leader(&rest, 30, "a leader while the old one is paused").await;
    writes_go_on(&load, 20, "while the leader is paused").await;
    for n in &rest {
        never_stale(&load, &n.endpoint(), true);
    }
    nodes[li].proc.resume();
    one_leader(
        &nodes.iter().collect::<Vec<_>>(),
        30,
        "one leader after SIGCONT",
    )
    .await;

    // 3. The leader cut off from both peers: the majority elects; the old
    // one stops calling itself leader within a few election timeouts
    // (check-quorum), while the test can still ask it.
    let l = one_leader(&nodes.iter().collect::<Vec<_>>(), 30, "a leader").await;
    let li = (l - 1) as usize;
    let mut fw = Firewall::default();
    let others: Vec<(u32, u16)> = all
        .iter()
        .filter(|i| **i != li)
        .map(|i| (nodes[*i].uid, nodes[*i].rpc.port()))
        .collect();
    fw.partition(nodes[li].uid, nodes[li].rpc.port(), &others);
    let rest: Vec<&Node> = all
        .iter()
        .filter(|i| **i != li)
        .map(|i| &nodes[*i])
        .collect();
    one_leader(&rest, 30, "a leader in the majority").await;
    writes_go_on(&load, 20, "while the leader is cut off").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = leaders(&nodes.iter().collect::<Vec<_>>()).await;
        if l.len() <= 1 && !l.contains(&(li as u64 + 1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cut-off node {} still reports itself leader: {l:?}",
            li + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once stepped down, a single leader from then on.
    for _ in 0..20 {
        let l = leaders(&nodes.iter().collect::<Vec<_>>()).await;
        assert!(l.len() <= 1, "two leaders during the partition: {l:?}");
        tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS)).await;
    }
    // The cut-off node cannot know the newest write: it must not say it
    // is missing.
    never_stale(&load, &nodes[li].endpoint(), false);
    for n in &rest {
        never_stale(&load, &n.endpoint(), true);
    }
    fw.heal();
    one_leader(
        &nodes.iter().collect::<Vec<_>>(),
        30,
        "one leader after the heal",
    )
    .await;
    writes_go_on(&load, 20, "after the heal").await;

    stop.store(true, Ordering::Release);
    for w in writers {
        w.await.unwrap();
    }
    let slowest = *load.slowest.lock().unwrap();
    assert!(
        slowest <= DEADLINE + MARGIN,
        "a create took {slowest:?} (deadline {DEADLINE:?})"
    );
    // Every acknowledged create is on every node.
    let acked = load.acked.lock().unwrap().clone();
    for n in &nodes {
        let c = Client::connect_to(&n.endpoint(), ClientOptions::default())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        for p in &acked {
            loop {
                match c.stat_at(p, ReadAt::Linearizable).await {
                    Ok(_) => break,
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        panic!("node {}: acknowledged {p} is missing", n.id)
                    }
                    Err(e) => {
                        assert!(Instant::now() < deadline, "node {}: {p}: {e}", n.id);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }
    }
    eprintln!(
        "{} creates acknowledged, {} outcome unknown, slowest call {slowest:?}",
        acked.len(),
        load.unknown.load(Ordering::Relaxed)
    );
    for n in &mut nodes {
        n.proc.kill();
    }
}
